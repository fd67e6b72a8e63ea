import pytest

from storage.statuses import ACTIVE, TERMINAL, derived_status, is_resubmittable


@pytest.mark.parametrize("status", sorted(ACTIVE))
def test_active_row_of_a_terminated_run_reads_abandoned(status):
    assert derived_status(status, "run-1", "terminated") == "abandoned"
    assert derived_status(status, "run-1", "completed") == "abandoned"
    assert derived_status(status, "run-1", None) == "abandoned"  # its run row is gone
    assert is_resubmittable(status, "run-1", "terminated")


@pytest.mark.parametrize("status", sorted(ACTIVE))
def test_active_row_of_an_active_run_is_running(status):
    assert derived_status(status, "run-1", "active") == status
    assert not is_resubmittable(status, "run-1", "active")


@pytest.mark.parametrize("status", sorted(ACTIVE))
def test_keyless_active_row_is_resubmittable(status):
    assert derived_status(status, None, None) == status
    assert is_resubmittable(status, None, None)


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_terminal_rows_stay_terminal(status):
    assert derived_status(status, "run-1", "active") == status
    assert is_resubmittable(status, "run-1", "active")
