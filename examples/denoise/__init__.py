"""A second example, a different task: a small convolutional denoising autoencoder on the digits.

Noisy 8×8 digits in, clean digits out, scored by PSNR. Its trainer is one object (model, optimizer,
per-step schedule, its own noise generator, counters) that saves and resumes itself; its smoke adapter
(``adapter.py``) hands that object to runaudit's smoke gate unchanged. It has not adopted the capsule
layout, so its ``capsule_roundtrip`` reports NOT RUN: that is what a project's first smoke looks like.
"""
