"""`nodeperf validate --dataset FILE.csv`: a file given where a dataset name goes is answered with where a file goes
(the positional FILE.csv), not only the list of names; a misspelt name keeps its near match. Exit 2, one line."""

from __future__ import annotations

import pytest

from tests.bad_input.contract import cli_exit, one_line

NAMES = "published, edge, frameworks, energy, kernels, training, serving, collectives"
HINT = ("a measurement CSV is the FILE.csv argument (`nodeperf validate FILE.csv --hardware NAME`, or `--dataset "
        "NAME FILE.csv` for the groups that read one)")


@pytest.mark.parametrize("value", ["runs.csv", "data/runs.csv", "./"])
def test_validate_dataset_given_a_path_says_where_files_go(capsys, value) -> None:
    rc, err = cli_exit(capsys, "validate", "--dataset", value)
    assert one_line(rc, err) == f"nodeperf: error: argument --dataset: got {value!r}, a path; expected one of {NAMES}; {HINT}"


def test_validate_dataset_misspelt_name_keeps_its_near_match(capsys) -> None:
    rc, err = cli_exit(capsys, "validate", "--dataset", "trainig")
    assert one_line(rc, err) == (f"nodeperf: error: argument --dataset: got 'trainig'; expected one of {NAMES}; did you "
                                 "mean 'training'?")
