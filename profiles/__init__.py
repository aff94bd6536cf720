"""Platform profiles: one TOML data file per platform, validated by ``profile.schema.json``.

The loader and the model live in :mod:`runaudit.platforms`; ``runaudit profiles`` lists them.
"""
