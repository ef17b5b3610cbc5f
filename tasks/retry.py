"""When Prefect retries a task: after a crash, never after a user error (a SolrlError the user must fix)."""

from __future__ import annotations

from solrl_core.errors import SolrlError


def retry_unless_user_error(task, task_run, state) -> bool:
    try:
        state.result()
    except SolrlError:
        return False
    except BaseException:  # noqa: BLE001 - any other failure is worth a retry
        return True
    return True
