"""Runs finishing at once on a fresh MLflow store (issue 26 item 10): the store's dataset
lookup-then-insert races, and the loser once failed on the UNIQUE constraint (experiment,
name, digest), leaving its run RUNNING without traces."""

from __future__ import annotations

import threading

import pytest

pytestmark = pytest.mark.slow  # fresh SQLite stores, several rounds


class _StoreClient:
    """The ``log_inputs`` call of ``MlflowClient`` over one MLflow SQL store of its own (as
    each process of a run has): the race is between the stores' sessions."""

    def __init__(self, store):
        self.store = store

    def log_inputs(self, run_id, datasets):
        self.store.log_inputs(run_id, datasets=datasets)


def test_runs_logging_the_same_dataset_at_once_all_link_it(tmp_path):
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from evalkit.tracking.mlflow_tracking import log_dataset

    dataset = DatasetInput(dataset=Dataset(name="acebench en", digest="d" * 36, source_type="local", source="{}"),
                           tags=[InputTag(key="mlflow.data.context", value="eval")])  # fmt: skip
    n = 6
    for round_ in range(3):  # without the retry, about 2 in 3 of these calls failed here
        root = tmp_path / str(round_)
        uri = f"sqlite:///{root / 'mlflow.db'}"
        root.mkdir()
        base = SqlAlchemyStore(uri, str(root / "artifacts"))
        exp = base.create_experiment("evalkit")
        runs = [base.create_run(exp, "u", 0, [], f"r{i}").info.run_id for i in range(n)]
        stores = [SqlAlchemyStore(uri, str(root / "artifacts")) for _ in range(n)]
        barrier, errors = threading.Barrier(n), []

        def log(i: int) -> None:
            barrier.wait()
            try:
                log_dataset(_StoreClient(stores[i]), runs[i], dataset)
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(str(exc)[:120])

        threads = [threading.Thread(target=log, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        linked = [[d.dataset.digest for d in base.get_run(r).inputs.dataset_inputs] for r in runs]
        assert linked == [["d" * 36]] * n
