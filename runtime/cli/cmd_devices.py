"""`unmask devices`: what this machine offers, what would run where, and why.

Maps its flags onto unmask.devices (detect, survey, select) and prints the result
as rich tables, or as JSON with --json. An unknown device name fails at once;
other selection failures (provider missing, model too big) are shown with the
tables, then exit 1.
"""

from __future__ import annotations

import json
import warnings

import click

from ..errors import DeviceError


@click.command("devices")
@click.option("--model", "model", default=None,
              help="A model package (folder or stored name): check its precision, target and size on each device.")
@click.option("--device", default="auto", show_default=True,
              help="Show what this device choice would do (auto, cpu, cuda, cuda:1, dml, coreml, openvino).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def command(model: str | None, device: str, as_json: bool) -> None:
    """Show detected hardware, execution providers, and which device a model would use."""
    from .. import devices

    manifest = None
    if model is not None:
        from ..manifest import read_manifest

        from ..store import resolve

        manifest = read_manifest(resolve(model))  # a name in the model store -> its folder
    profiles = devices.load_profiles()
    devices.parse_device(device, profiles)  # a misspelt name fails before any detection or table
    detection = devices.detect()
    rows = devices.survey(detection, profiles)
    placement, error = None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", devices.DeviceFallbackWarning)
        try:
            placement = devices.select(manifest, device, detection=detection, profiles=profiles)
        except DeviceError as exc:
            error = exc
    messages = [str(w.message) for w in caught]
    if as_json:
        click.echo(json.dumps(_as_dict(detection, rows, placement, error, messages), indent=2))
    else:
        _print_tables(detection, rows, placement, error, messages, manifest)
    if error is not None:
        raise error


def _as_dict(detection, rows, placement, error, messages) -> dict:
    return {
        "detection": detection.to_dict(),
        "profiles": [
            {
                "name": r.profile.name,
                "device": r.profile.device,
                "provider": r.profile.provider,
                "applies": r.applies,
                "in_build": r.in_build,
                "probe": None if r.probe is None else {"ok": r.probe.ok, "reason": r.probe.reason},
                "auto": r.profile.auto,
                "priority": r.profile.priority,
                "precision": r.profile.package.precision,
                "target": r.profile.package.target,
            }
            for r in rows
        ],
        "choice": placement.to_dict() if placement is not None else None,
        "error": str(error) if error is not None else None,
        "warnings": messages,
    }


def _print_tables(detection, rows, placement, error, messages, manifest) -> None:
    from rich.console import Console
    from rich.table import Table

    from ..devices.select import gib

    console = Console()
    cpu, mem = detection.cpu, detection.memory
    machine = Table(title="This machine", show_header=False, title_justify="left")
    machine.add_column(style="bold")
    machine.add_column()
    machine.add_row("OS", f"{detection.os} ({cpu.arch})")
    machine.add_row("CPU", f"{cpu.model}: {cpu.physical_cores} physical / {cpu.logical_cores} logical cores usable")
    machine.add_row("features", " ".join(cpu.features) or "-")
    machine.add_row("load", "unknown (no load average on this OS)" if cpu.load is None else
                    f"{cpu.load:.1f} (1-minute average, on the cores usable here)")
    machine.add_row("RAM", f"{gib(mem.available_bytes)} free of {gib(mem.total_bytes)}")
    machine.add_row("onnxruntime", f"{detection.onnxruntime_version or 'not importable'}: "
                    + ", ".join(detection.available_providers))
    for d in detection.ep_devices:
        machine.add_row("ep device", f"{d.ep_name} -> {d.device_type} {d.vendor} (id {d.device_id})")
    for g in detection.gpus:
        memory = f", {gib(g.memory_free_bytes)} free of {gib(g.memory_total_bytes)}" if g.memory_free_bytes else ""
        machine.add_row(f"GPU {g.index}", f"{g.name}{memory} [{g.source}]")
    for problem in detection.problems:
        machine.add_row("problem", problem)
    if manifest is not None:
        machine.add_row("model", f"{manifest.architecture} {manifest.precision}/{manifest.target}, "
                        f"{gib(manifest.size_bytes)} of graph files")
    console.print(machine)

    table = Table(title="Device profiles (best first)", title_justify="left")
    for header in ("device", "profile", "provider", "for this machine", "in build", "probe", "exports as"):
        table.add_column(header)
    for r in rows:
        p = r.profile
        chosen = placement is not None and placement.profile.name == p.name
        probe = "-" if r.probe is None else ("ok" if r.probe.ok else f"failed: {r.probe.reason}")
        table.add_row(
            f"[bold green]{p.device} *[/]" if chosen else p.device,
            p.name,
            p.provider.replace("ExecutionProvider", ""),
            ("yes" if r.applies else "no") + ("" if p.auto else " (by name only)"),
            "yes" if r.in_build else "no",
            probe,
            f"{p.package.precision}/{p.package.target}",
        )
    console.print(table)
    for message in messages:
        console.print(f"[yellow]warning:[/] {message}", highlight=False)
    if placement is not None:
        console.print(f"[bold]chosen:[/] {placement.explanation}", highlight=False)
