"""unmask.export: convert a trained denoiser checkpoint into a model package."""
