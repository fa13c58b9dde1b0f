"""unmask.export.training: train the embedded diffusion LM on `unmask.tasks`.

    python -m unmask.export.training.train --out DIR [--minutes N] [--overwrite]

`tokenizer` builds the byte-level BPE (LLaDA special-token strings, one token per
digit); `train` runs masked-diffusion SFT on the reference LLaDA model
(`unmask.export.reference.LladaModel`) and writes an HF LLaDA folder that the
standard `unmask export` converts.
"""
