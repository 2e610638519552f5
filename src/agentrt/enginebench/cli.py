"""`agentrt calibrate`: measure a live engine into a preset file (`engine/preset_file.py`)."""

from __future__ import annotations

from pathlib import Path

import typer

from agentrt.errors import AgentrtError


def calibrate(
    out: Path = typer.Option(..., "-o", "--out", help="preset file to write (JSON)"),
    engine: str = typer.Option("vllm", "--engine", help="the engine to measure: vllm (a local vLLM on this machine)"),
    model_size: str = typer.Option("tiny", "--model-size", help="local random-weight model: tiny or small"),
    vllm_blocks: int = typer.Option(256, "--vllm-blocks", help="KV pool in engine blocks of 32 tokens (as bench --engine vllm)"),
    repeats: int = typer.Option(3, "--repeats", help="prefill measurements per shape (the median is kept)"),
    log: Path = typer.Option(None, "--log", help="keep the server's log here"),
    vllm_own_priority: bool = typer.Option(False, "--vllm-own-priority", help="leave vLLM's engine core at its own CPU priority (default: nice 19, as bench --engine vllm runs it)"),
    refit: Path = typer.Option(None, "--refit", help="fit a preset file's stored points again under the current cost model (no engine; the measurements are kept)"),
) -> None:
    """Measure a live engine's prefill and decode costs and scheduler limits; write a preset file.

    `agentrt bench --preset-file FILE` replays on the measured engine; `agentrt presets --file
    FILE` shows what it holds. Takes about 5 minutes on 2 cores (run nothing else meanwhile)."""
    import importlib.util

    from agentrt.engine.preset_file import describe, write_preset_file
    from agentrt.checks import output_file
    if refit is not None:
        _refit(refit, out)
        return
    if engine != "vllm":
        raise AgentrtError(f"--engine must be vllm (the only live engine agentrt runs), got {engine!r}")
    if importlib.util.find_spec("vllm") is None:
        raise AgentrtError('calibrate --engine vllm needs vLLM: pip install -e ".[vllm]"')
    if model_size not in ("tiny", "small"):
        raise AgentrtError(f"--model-size must be tiny or small, got {model_size!r}")
    if vllm_blocks < 8:
        raise AgentrtError(f"--vllm-blocks must be >= 8, got {vllm_blocks}")
    if not 1 <= repeats <= 20:
        raise AgentrtError(f"--repeats must be 1 to 20, got {repeats}")
    output_file(out, "-o")
    from agentrt.enginebench.calibrate import calibrate_vllm
    from agentrt.local.engine_nice import ENGINE_CORE_NICE
    cmd = (f"agentrt calibrate --engine vllm --model-size {model_size} --vllm-blocks {vllm_blocks} --repeats {repeats}"
           + (" --vllm-own-priority" if vllm_own_priority else ""))
    doc = calibrate_vllm(model_size, vllm_blocks, repeats=repeats, log_path=str(log) if log else None,
                         say=lambda m: typer.echo(m, err=True), command=cmd,
                         engine_core_nice=None if vllm_own_priority else ENGINE_CORE_NICE)
    pf = write_preset_file(doc, out)
    for what, value in describe(pf):
        typer.echo(f"{what:18s} {value}")
    typer.echo(f"wrote {out}")


def _refit(src: Path, out: Path) -> None:
    from agentrt.checks import output_file
    from agentrt.engine.preset_file import describe, load_preset_file, write_preset_file
    from agentrt.enginebench.calibrate import refit
    output_file(out, "-o")
    pf = load_preset_file(src)
    try:
        doc = refit(pf.doc, f"agentrt calibrate --refit {src} -o {out}")
    except ValueError as e:
        raise AgentrtError(f"{src}: {e}") from None
    pf = write_preset_file(doc, out)
    for what, value in describe(pf):
        typer.echo(f"{what:18s} {value}")
    typer.echo(f"wrote {out}")


def register_commands(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
