"""The suite's own layout (tests/support/suite_layout.py): tests mirror the package under tests/unit/, every e2e test
lives under tests/e2e/ or tests/lab/, and pytest's default import mode finds every test module by a name of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite_layout import E2E_FIXTURES, TESTS, heavy_files_first, mark_e2e_and_check_placement, suite_folder

TEST_FILES = sorted(TESTS.rglob("test_*.py"))


class Item:
    """What mark_e2e_and_check_placement reads of a collected test item."""

    def __init__(self, path: Path, *fixtures: str, marked: bool = False):
        self.path, self.name, self.fixturenames = path, f"test_in_{path.stem}", list(fixtures)
        self.marks = ["e2e"] if marked else []

    def add_marker(self, mark) -> None:
        self.marks.append(mark.name)

    def get_closest_marker(self, name: str):
        return name if name in self.marks else None


def test_a_test_is_e2e_by_its_folder_or_a_fixture_that_starts_processes():
    in_e2e, in_lab, unit = TESTS / "e2e" / "test_x.py", TESTS / "lab" / "test_y.py", TESTS / "unit" / "run" / "test_z.py"
    items = [Item(in_e2e), Item(in_lab, "session_env"), Item(in_lab), Item(unit, "tmp_path")]
    mark_e2e_and_check_placement(items)
    assert [item.marks for item in items] == [["e2e"], ["e2e"], [], []]
    assert suite_folder(in_e2e) == "e2e" and suite_folder(TESTS / "conftest.py") is None
    assert suite_folder(TESTS.parent / "flows" / "cli.py") is None  # outside the suite: no rule applies


@pytest.mark.parametrize("item", [Item(TESTS / "unit" / "run" / "test_z.py", sorted(E2E_FIXTURES)[0]),
                                  Item(TESTS / "unit" / "run" / "test_z.py", marked=True)], ids=["fixture", "mark"])
def test_an_e2e_test_outside_e2e_and_lab_stops_the_collection_naming_where_it_goes(item):
    with pytest.raises(pytest.UsageError) as refused:
        mark_e2e_and_check_placement([Item(TESTS / "unit" / "run" / "test_fine.py"), item])
    assert str(refused.value) == ("tests/unit/run/test_z.py: test_in_test_z start processes or servers (marked e2e): "
                                  "move them to tests/e2e/test_z.py")


def test_every_test_module_lives_in_an_area_e2e_or_lab_under_a_name_of_its_own():
    assert TEST_FILES
    places = {path.relative_to(TESTS).parts[0] for path in TEST_FILES}
    assert places == {"unit", "e2e", "lab"}, places
    assert all(len(path.relative_to(TESTS).parts) >= 3 for path in TEST_FILES if suite_folder(path) == "unit")
    names = [path.name for path in TEST_FILES]
    assert sorted({n for n in names if names.count(n) > 1}) == []  # pytest's default import mode needs unique names
    assert not list(TESTS.rglob("__init__.py"))  # ... and no packages (rootdir-relative module names)


class Collected:
    """What heavy_files_first reads of a collected test item: its node id and marks."""

    def __init__(self, nodeid: str, *marks: str):
        self.nodeid, self.marks = nodeid, marks

    def get_closest_marker(self, name: str):
        return name if name in self.marks else None


def test_files_of_e2e_or_slow_tests_go_first_then_those_with_more_tests():
    """The order `make test` hands files to its workers (--no-loadscope-reorder): a file's tests stay together and
    in order; files with an e2e or slow test before the others, and within each, more tests first."""
    items = [Collected("tests/unit/a/test_one.py::t"),
             Collected("tests/unit/b/test_many.py::t1"), Collected("tests/unit/b/test_many.py::t2"),
             Collected("tests/e2e/test_long.py::t", "e2e"),
             Collected("tests/unit/c/test_slow.py::t1"), Collected("tests/unit/c/test_slow.py::t2", "slow"),
             Collected("tests/e2e/test_short.py::t1", "e2e"), Collected("tests/e2e/test_short.py::t2", "e2e")]
    heavy_files_first(items)
    assert [item.nodeid for item in items] == [
        "tests/unit/c/test_slow.py::t1", "tests/unit/c/test_slow.py::t2",
        "tests/e2e/test_short.py::t1", "tests/e2e/test_short.py::t2", "tests/e2e/test_long.py::t",
        "tests/unit/b/test_many.py::t1", "tests/unit/b/test_many.py::t2", "tests/unit/a/test_one.py::t"]
