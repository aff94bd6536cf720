"""Audits read: one pytest module per gate.

``audits/test_<gate>.py::test_<check>[<subject>]`` is the audit ``<gate>.<check>`` on ``<subject>``.
"""
