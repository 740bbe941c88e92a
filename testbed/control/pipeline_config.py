"""The forwarding-pipeline config to push: P4Info plus the target's device config.

* engine: the embedded engine compiles p4/fabric.p4 for the P4Info; the device config
  is the P4 source itself (the engine's P4Runtime server compiles it again).
* bmv2:   p4c-bm2-ss output: a P4Info text file and BMv2 JSON. Either pass both files,
          or have `p4c-bm2-ss` on PATH and they are built into a cache next to the program.
"""
from dataclasses import dataclass
from pathlib import Path
import shutil
import subprocess

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from testbed.control.p4runtime_io import ControlError

TARGETS = ("engine", "bmv2")


@dataclass
class PipelineConfig:
    p4info: p4info_pb2.P4Info
    device_config: bytes
    source: str                      # what it was made from, for messages


def load(program_path, target="engine", p4info_path=None, device_config_path=None):
    if target not in TARGETS:
        raise ControlError(f"target {target!r}: choose one of {', '.join(TARGETS)}")
    if p4info_path and device_config_path:
        return _from_files(p4info_path, device_config_path)
    path = Path(program_path)
    if not path.is_file():
        raise ControlError(f"P4 program {path} does not exist")
    if target == "engine":
        return _engine(path)
    return _bmv2(path)


def _from_files(p4info_path, device_config_path):
    p4info = p4info_pb2.P4Info()
    try:
        text = Path(p4info_path).read_text()
        data = Path(device_config_path).read_bytes()
    except OSError as exc:
        raise ControlError(f"cannot read the pipeline files: {exc}") from None
    try:
        if p4info_path.endswith((".bin", ".pb")):
            p4info.ParseFromString(Path(p4info_path).read_bytes())
        else:
            text_format.Merge(text, p4info, allow_unknown_field=True)
    except Exception as exc:
        raise ControlError(f"{p4info_path}: not a P4Info: {exc}") from None
    return PipelineConfig(p4info, data, f"{p4info_path} + {device_config_path}")


def _engine(path):
    """The program compiled for its P4Info: once per version of the file per process (a sweep
    worker or a lab runs many fabrics of the same program; an edited #include is seen by the
    next process)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _ENGINE_CONFIGS:
        _ENGINE_CONFIGS.clear()          # one program version at a time is all a process needs
        _ENGINE_CONFIGS[key] = _compile_engine(path)
    return _ENGINE_CONFIGS[key]


_ENGINE_CONFIGS = {}


def _compile_engine(path):
    try:
        from testbed.p4engine import P4Error, compile_file
    except ImportError as exc:
        raise ControlError(f"the P4 engine is not available to compile {path}: {exc}") from None
    try:
        program = compile_file(str(path))
    except P4Error as exc:
        raise ControlError(f"{path} does not compile:\n{exc}") from None
    source = program.source
    return PipelineConfig(program.p4info, source.encode() if isinstance(source, str) else bytes(source), str(path))


def _bmv2(path):
    compiler = shutil.which("p4c-bm2-ss")
    if compiler is None:
        raise ControlError("the bmv2 target needs p4c-bm2-ss output: install p4c (the Vagrant VM has it) "
                           "or pass p4info_path= and device_config_path= (P4Info text + BMv2 JSON)")
    out = path.parent / "build"
    out.mkdir(exist_ok=True)
    p4info_path = out / f"{path.stem}.p4info.txt"
    json_path = out / f"{path.stem}.json"
    if not (json_path.exists() and p4info_path.exists()
            and json_path.stat().st_mtime >= path.stat().st_mtime):
        cmd = [compiler, "--arch", "v1model", "--p4runtime-files", str(p4info_path), "-o", str(json_path), str(path)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ControlError(f"p4c-bm2-ss rejected {path}:\n{done.stderr.strip()}")
    return _from_files(str(p4info_path), str(json_path))
