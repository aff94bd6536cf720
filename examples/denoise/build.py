"""Produce a denoiser run through the capsule writer: train (resuming), score PSNR per test image under
each noise condition, render the fixed selection, declare. Seal it with ``runaudit close``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

SOURCE_DIR = Path(__file__).resolve().parent
TEST_ID = "main"
ROLES = ("input", "prediction", "target")


def produce(
    root: Path, run_id: str, config: dict[str, Any], *, log: Callable[[str], None] = lambda line: None
) -> Path:
    """``root/active/<run_id>``, trained, scored and declared; returns the folder."""
    import torch

    from runaudit.examples.denoise.evaluate import denoise, noisy_inputs, psnr
    from runaudit.examples.denoise.train import digits_split, fit
    from runaudit.examples.digits import data as digits_data
    from runaudit.writer import Metric, Selection, open_run

    dataset, split = digits_split(config)
    data, settings = config["data"], config["train"]
    dataset_identity, split_identity = digits_data.identities(dataset, split, data["split_seed"])
    with open_run(
        root,
        run_id,
        task="reconstruction",
        config=config,
        metrics=[Metric("psnr", "higher", "mean", precision=2, unit="dB")],
        data=dataset_identity,
        split=split_identity,
        seed=settings["seed"],
        epochs=settings["epochs"],
        batch_size=settings["batch_size"],
        selection=Selection("psnr", "max", "val"),
        schedule="exponential",
        protocol_id="digits-denoise-psnr-v1",
        entrypoint="python -m runaudit.examples.denoise",
        source_dir=SOURCE_DIR,
    ) as run:
        trainer = fit(run, config, log=log)
        trainer.model.load_state_dict(run.best_weights())
        clean = torch.from_numpy(dataset.inputs(split["test"]))
        sample_ids = [dataset.sample_ids[index] for index in split["test"]]
        sigmas: dict[str, float] = config["eval"]["sigmas"]
        with run.test(TEST_ID, sample_ids=sample_ids, conditions=list(sigmas), roles=ROLES) as test:
            position = {sample_id: index for index, sample_id in enumerate(sample_ids)}
            for condition, sigma in sigmas.items():
                noisy = noisy_inputs(clean, sigma, seed=config["eval"]["noise_seed"])
                denoised = denoise(trainer.model, noisy)
                test.score(condition, sample_ids, psnr=psnr(denoised, clean), output=denoised.flatten(1))
                for sample_id in test.selected:
                    index = position[sample_id]
                    test.render(
                        condition,
                        sample_id,
                        input=noisy[index],
                        prediction=denoised[index],
                        target=clean[index],
                    )
        run.declare("seeds", "single", "the example trains one seed")
        run.declare("split_scheme", "stratified", "the digits demo's seeded, class-stratified split")
    return run.folder
