"""Runners move: thin verbs over the filesystem, rsync, SSH and tmux that prove what they did.

``runaudit <verb>`` and ``python -m runaudit.runners <verb>`` are the same thing. Each verb lives in its
own module, which exposes ``add_verb(verbs)`` to register its sub-command.
"""
