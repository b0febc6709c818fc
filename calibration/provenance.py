"""Where a measurement was taken: this machine's hardware and versions, the git commit, the command.

Every points file, profile and live record carries these (STYLE.md section 7: GPU name and
count, driver, CUDA, torch and NCCL versions, git commit, command line). torch and nvidia-smi
are asked only when present, so this runs on a CPU-only machine too.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
CLI_MAIN_PARTS = ("simulator", "cli", "__main__.py")  # `python3 -m simulator.cli` runs this file


def _run_text(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=REPO_DIR)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def git_commit() -> str | None:
    """The checked-out commit of this repository, or None outside a git checkout."""
    return _run_text(["git", "rev-parse", "HEAD"])


def collect_hardware_info() -> dict:
    """HardwareInfo fields of this machine (torch and nvidia-smi when present; CPU otherwise)."""
    info: dict = {"gpu_name": "cpu (no CUDA)", "gpu_count": 1, "interconnect": "none (CPU run)"}
    try:
        import torch
    except ImportError:
        return info
    info["torch_version"] = torch.__version__
    info["cuda_version"] = torch.version.cuda
    if not torch.cuda.is_available():
        return info
    info["gpu_name"] = torch.cuda.get_device_name(0)
    info["gpu_count"] = torch.cuda.device_count()
    try:
        info["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
    except (AttributeError, RuntimeError, TypeError):
        pass
    info["driver_version"] = _run_text(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if info["driver_version"]:
        info["driver_version"] = info["driver_version"].splitlines()[0]
    topo = _run_text(["nvidia-smi", "topo", "-m"])
    info["topology"] = topo
    links = sorted({w for w in (topo or "").split() if w.startswith("NV") and w[2:].isdigit()})
    info["interconnect"] = ("single GPU" if info["gpu_count"] == 1
                            else f"NVLink ({', '.join(links)})" if links else "PCIe")
    return info


def command_line() -> str:
    """This process's command line, as a user would retype it: `specdecsim ARGS` under the CLI
    (the console script or `python3 -m simulator.cli`), else the interpreter and its arguments."""
    argv = list(sys.argv) or [""]
    prog = Path(argv[0])
    if prog.name == "specdecsim" or prog.parts[-3:] == CLI_MAIN_PARTS:
        return shlex.join(["specdecsim", *argv[1:]])
    return shlex.join([Path(sys.executable).name, *argv])
