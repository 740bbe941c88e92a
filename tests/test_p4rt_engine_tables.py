"""The P4Runtime server's tests again, with the engine's own tables and externs behind it."""
import pytest

import switch_fake_engine
import test_p4rt_server as base

try:
    from testbed.p4engine import externs, tables  # noqa: F401
    MISSING = None
except ImportError as exc:
    MISSING = f"engine runtime classes not available: {exc}"

pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


@pytest.fixture(autouse=True)
def real_tables(monkeypatch):
    monkeypatch.setattr(base, "FakeProgram", switch_fake_engine.RealTablesProgram)


device = base.device
shell = base.shell
test_entries_written_with_p4runtime_shell_forward_and_read_back = \
    base.test_entries_written_with_p4runtime_shell_forward_and_read_back
test_every_match_kind_priorities_and_wildcard_read = base.test_every_match_kind_priorities_and_wildcard_read
test_default_entry_counters_meters_registers = base.test_default_entry_counters_meters_registers
test_direct_counter_follows_entry = base.test_direct_counter_follows_entry
test_write_errors_use_spec_codes_per_update = base.test_write_errors_use_spec_codes_per_update


def test_the_engine_classes_are_the_ones_programmed(device, shell):
    from testbed.p4engine import tables
    pipeline = device["switch"].pipeline
    assert isinstance(pipeline, switch_fake_engine.RealTablesPipeline)
    assert isinstance(pipeline.tables["MyIngress.fwd"], tables.Table)
    te = shell.TableEntry("MyIngress.fwd")(action="MyIngress.set_port")
    te.match["standard_metadata.ingress_port"] = "4"
    te.action["port"] = "1"
    te.insert()
    action, hit, _entry = pipeline.tables["MyIngress.fwd"].lookup((4,))
    assert hit and action.action == "MyIngress.set_port" and action.args == {"port": 1}
