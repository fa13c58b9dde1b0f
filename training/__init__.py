"""training: how the embedded model is made; a folder of the checkout, not of the installed package.

    python -m training.train --out CKPT [--minutes N] [--overwrite]
    python -m training.ship_default CKPT

`tokenizer` builds the byte-level BPE (LLaDA special-token strings, one token per
digit); `train` runs masked-diffusion SFT on the reference LLaDA model
(`unmask.export.reference.LladaModel`) over `unmask.tasks` and writes an HF LLaDA
folder; `ship_default` converts one with the standard export and installs it as the
package's embedded model. Run from the repository root with the test extra installed;
the recipe and the run history are in training/README.md.
"""
