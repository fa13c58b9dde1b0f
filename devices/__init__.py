"""unmask.devices: device profiles, detection and execution-provider selection."""
