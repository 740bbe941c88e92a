"""Every `rocelab` command refuses bad option values before doing anything: one line on
stderr naming the option, exit status 2, never a traceback (testbed/argtypes.py)."""
import pytest

from testbed.cli import main

BAD = [
    "run --delay-us inf", "run --delay-us -1", "run --delay-us nan", "run --jitter-us inf", "run --loss 1.5",
    "run --queue-depth 0", "run --queue-depth 1e3", "run --grpc-base-port 70000", "run --link-rate nan",
    "run --oversubscription inf", "run --oversubscription 0:0", "run --size inf", "run --size 1e30",
    "run --size -5", "run --size 1.5", "run --timeout-s nan", "run --iterations 0", "run --spines 1e9",
    "run --mtu 100000", "run --out /proc/rocelab-test", "run --out /etc/hostname", "run --ranks 1",
    "run --ecn 5,20,nan", "run --ecn 5,99999999999999999999,0.5", "run --ecn 5,20,inf",
    "switch --delay-us inf", "switch --delay-us -1", "switch --delay-us nan", "switch --jitter-us inf",
    "switch --queue-depth 0", "switch --loss nan", "switch --rate inf", "switch --rate 1e30",
    "switch --grpc-server-addr 127.0.0.1:65536", "switch --agent-addr 127.0.0.1:0", "switch --cpu-port 511",
    "switch --device-id -1",
    "lab ecmp --grpc-base-port 99999", "lab ecmp --out /sys/rocelab", "demo --out /etc/hostname",
    "traffic run --job j --rank -1", "traffic run --job j --rank 0 --out /proc/x",
    "te run --fabric f --rest-port 0", "te run --fabric f --interval inf", "te interval nan",
    "te demand add leaf1 1 10.1.2.0/24 inf", "te link leaf1 70000 down", "fabric flowlet 1e400",
    "fabric ecn 5 20 0.2 --priority 8", "stats --timeout nan",
]


@pytest.mark.parametrize("argv", BAD)
def test_bad_option_is_one_line_and_status_2(argv, capsys):
    try:
        status = main(argv.split())   # refused after parsing (checks across options)
    except SystemExit as exited:     # refused by argparse (one option's value)
        status = exited.code
    err = capsys.readouterr().err
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    option = argv.split()[-2] if argv.split()[-2].startswith("-") else None
    if option:
        assert option in lines[0]


def test_run_reports_a_program_that_does_not_compile_before_booting(tmp_path, capsys):
    bad = tmp_path / "bad.p4"
    bad.write_text("#include <v1model.p4>\nparser P(packet_in p) { state start { transition nowhere; } }\n")
    assert main(["run", "--program", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not compile" in err[0] and f"{bad}:" in err[0]
    assert not (tmp_path / "out").exists()  # nothing booted, nothing written


def test_huge_size_is_refused_with_the_time_it_would_take(capsys):
    assert main(["run", "--size", "1024G", "--link-rate", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--size" in err[0] and "would run for" in err[0]


@pytest.mark.parametrize("content", [b"[" * 100000 + b"]" * 100000, bytes(range(256)) * 4,
                                     b'{"spec": {"spines": NaN}}', b"[]", b'{"spec": [1]}'])
@pytest.mark.parametrize("command", [["fabric", "hash", "qpn"], ["stats"], ["te", "run", "--programmer", "dry-run"]])
def test_a_fabric_file_that_is_not_one_is_one_line(tmp_path, capsys, content, command):
    path = tmp_path / "fabric.json"
    path.write_bytes(content)
    argv = command[:1] + ["--fabric", str(path)] + command[1:] if command[0] != "te" else \
        command + ["--fabric", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize("argv, value", [("run --size -64K", "-64K"), ("fabric headroom --rate -400G", "-400G"),
                                         ("run --oversubscription -2:1", "-2:1")])
def test_a_negative_value_with_a_unit_is_named_not_taken_for_an_option(argv, value, capsys):
    # argparse alone says "expected one argument" for `-64K`, as if the value were missing
    try:
        status = main(argv.split())
    except SystemExit as exited:
        status = exited.code
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1 and f"'{value}'" in err[0] and "expected one argument" not in err[0], err


@pytest.mark.parametrize("command", ["run", "demo"])
def test_target_bmv2_without_bmv2_is_one_line_and_writes_nothing(command, tmp_path, monkeypatch, capsys):
    # `make demo TARGET=bmv2` outside the VM: it printed the demo's header and "booting" and left
    # OUT/fabric.json behind before saying BMv2 is missing
    import os
    import shutil
    real_which = shutil.which
    monkeypatch.setattr(os, "geteuid", lambda: 0)     # the check under test comes after root's
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "simple_switch_grpc"
                        else real_which(name, *a, **k) or f"/usr/bin/{name}")
    out = tmp_path / "out"
    assert main([command, "--target", "bmv2", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "simple_switch_grpc not found" in err[0], err
    assert captured.out == "" and not out.exists()


@pytest.mark.parametrize("argv, says", [
    ("run --link-rate 0", "'0' must be greater than 0 and at most 1.6e+06"),   # not "between 0 and"
    ("run --link-rate 2e6", "'2e6' must be greater than 0 and at most 1.6e+06"),
    ("run --qps-per-conn 0", "'0' must be between 1 and 64"),
])
def test_a_range_message_says_which_ends_are_allowed(argv, says, capsys):
    with pytest.raises(SystemExit):
        main(argv.split())
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["run", "--clock", "virtual", "--help"], ["sweep", "--help"]])
def test_help_does_not_import_grpc_or_the_controller(argv):
    # testbed/control/__init__.py and testbed/sweep/__init__.py import their heavy parts on first use:
    # every rocelab command imports both packages for its CLI group, few talk P4Runtime.
    import subprocess
    import sys
    code = ("import sys\nfrom testbed.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('grpc', 'p4runtime_sh', 'testbed.control.controller', 'testbed.sweep.api')"
            " if m in sys.modules), file=sys.stderr)\n")
    res = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert res.stderr.strip().splitlines()[-1] == "[]", res.stderr
    assert "usage: rocelab" in res.stdout


def test_the_control_package_still_gives_its_names():
    import testbed.control as control
    from testbed.control import ControlError, FabricController, KnobError, Knobs, RoutingError, program_names
    assert FabricController.__module__ == "testbed.control.controller" and issubclass(KnobError, ValueError)
    assert {ControlError, Knobs, RoutingError} and program_names.__name__ == "testbed.control.program_names"
    assert {"FabricController", "Knobs"} <= set(dir(control))
    with pytest.raises(AttributeError):
        control.NoSuchThing
