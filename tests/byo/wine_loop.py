"""A plain PyTorch training loop, as a researcher writes one, plus the lines that make it write a capsule.

The lines ending in ``# runaudit`` are the whole cost of adopting the writer (tests/test_writer.py counts
them). Usage: ``python wine_loop.py ROOT RUN_ID [--epochs N] [--crash-after E] [--seal]``.
"""

# One statement per line: tests/test_writer.py counts the lines that adopt the writer.
# fmt: off
import argparse

import numpy as np
import torch
from sklearn.datasets import load_wine
from torch import nn

from runaudit.writer import Dataset, Split, open_run  # runaudit

parser = argparse.ArgumentParser()
parser.add_argument("root")
parser.add_argument("run_id")
parser.add_argument("--epochs", type=int, default=12)
parser.add_argument("--crash-after", type=int, default=0)
parser.add_argument("--seal", action="store_true")
args = parser.parse_args()

config = {"lr": 0.01, "hidden": 32, "seed": 0, "batch": 16, "epochs": args.epochs}
torch.manual_seed(config["seed"])
x, y = load_wine(return_X_y=True)
x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
order = np.random.default_rng(0).permutation(len(y))
train, val, test = order[:108], order[108:143], order[143:]
model = nn.Sequential(nn.Linear(13, config["hidden"]), nn.ReLU(), nn.Linear(config["hidden"], 3))
optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
xt, yt = torch.from_numpy(x), torch.from_numpy(y)

run = open_run(args.root, args.run_id, task="classification", config=config, metrics=["accuracy"],  # runaudit
               data=Dataset.of("wine", "sklearn-1", x, y), split=Split("wine-s0", "random", 108, 35, 35),  # runaudit
               seed=config["seed"], epochs=args.epochs, batch_size=config["batch"])  # runaudit
run.restore(model, optimizer=optimizer)  # runaudit
step = run.step  # runaudit
for epoch in range(run.epoch + 1, args.epochs + 1):  # was: range(1, args.epochs + 1)
    model.train()
    batches = np.random.default_rng(epoch).permutation(train)
    for start in range(0, len(batches), config["batch"]):
        index = torch.from_numpy(batches[start : start + config["batch"]])
        loss = nn.functional.cross_entropy(model(xt[index]), yt[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
    model.eval()
    with torch.no_grad():
        val_accuracy = (model(xt[val]).argmax(1) == yt[val]).float().mean().item()
    run.log(epoch=epoch, step=step, train_loss=loss.item(), val_accuracy=val_accuracy)  # runaudit
    run.checkpoint(model, epoch=epoch, step=step, value=val_accuracy, state={"optimizer": optimizer})  # runaudit
    if epoch == args.crash_after:
        raise SystemExit(f"crashed after epoch {epoch}")

model.load_state_dict(run.best_weights())  # runaudit
ids = [f"wine-{index}" for index in test]
with torch.no_grad():
    predicted = model(xt[test]).argmax(1).numpy()
with run.test(sample_ids=ids) as scored:  # runaudit
    scored.score("clean", ids, accuracy=predicted == y[test], target=y[test], pred=predicted)  # runaudit
    for sample_id in scored.selected:  # runaudit
        row = x[test[ids.index(sample_id)]]
        chart = np.eye(3)[predicted[ids.index(sample_id)]][None]
        scored.render("clean", sample_id, input=np.clip(row[None] / 4 + 0.5, 0, 1), prediction=chart)  # runaudit
run.close() if args.seal else run.finish()  # runaudit
