"""A client's data error reaches the server as a code and a column, never a cell or a line.

Flower 1.42 turns a ClientApp exception into the reply's error reason
``str(type(exc)) + ":<'" + str(exc) + "'>"`` (``flwr/supernode/runtime/
run_clientapp.py``; the simulation engine wraps it in ``ClientAppException``
and logs its traceback), which the server prints. Before, a bad CSV cell
reached the server log verbatim: ``... column 'age', line 6: value
'forty-four' is not a number``.
"""

import logging
import re
import traceback

import fedpriv.clients.app as client_app
import pytest
from flwr.app import ConfigRecord, Context, Message, Metadata, RecordDict
from flwr.clientapp.client_app import ClientAppException

from fedpriv.data import load_csv, node
from fedpriv.errors import INTERNAL, ClientFailure, DataError, public_error
from fedpriv.federation.settings import RunSettings
from tests.data.test_csv_errors import GOOD as ROWS
from tests.data.test_csv_errors import HEADER, SCHEMA

SECRET = "forty-four"


def _bad_csv(tmp_path):
    rows = list(ROWS)
    rows[4] = rows[4].replace(",44,", f",{SECRET},")  # file line 6
    path = tmp_path / "hospital-secret-name.csv"
    path.write_text(HEADER + "".join(rows))
    return path


def _message(kind: str, content: RecordDict) -> Message:
    """A server-to-node message as a SuperNode hands it to the ClientApp."""
    meta = Metadata(
        run_id=1,
        message_id="m1",
        src_node_id=1,
        dst_node_id=7,
        reply_to_message_id="",
        group_id="",
        created_at=0.0,
        ttl=60.0,
        message_type=f"query.{kind}",
    )
    return Message(content=content, metadata=meta)


def _flower_reason(exc: BaseException) -> str:
    # Verbatim from flwr/supernode/runtime/run_clientapp.py (Flower 1.42).
    return str(type(exc)) + ":<'" + str(exc) + "'>"


def _assert_sanitised(text: str, path) -> None:
    assert SECRET not in text
    assert "line" not in text
    assert str(path.parent) not in text and path.name not in text
    # No line number, no cell; the node's public partition id is the one number allowed.
    assert not re.search(r"\d", re.sub(r"node=\d+\)", ")", text.replace("flwr", "")))


def test_public_error_keeps_only_the_code_and_the_column(tmp_path):
    path = _bad_csv(tmp_path)
    with pytest.raises(DataError) as err:
        load_csv(path, SCHEMA, use_cache=False)
    assert SECRET in str(err.value) and "line 6" in str(err.value)  # the owner's message
    public = public_error(err.value)
    assert str(public) == "DataError(code='not_a_number', column='age')"
    assert (public.code, public.column) == ("not_a_number", "age")
    _assert_sanitised(_flower_reason(public), path)


def test_any_other_exception_becomes_its_type_name_only():
    public = public_error(ValueError("|x| must be <= 12.0; found 4711.25 at flat index 3"))
    assert str(public) == f"ValueError(code='{INTERNAL}')"
    assert public_error(public).code == INTERNAL  # idempotent
    with pytest.raises(ValueError, match="code must match"):
        DataError("x", code="Not A Code: 44")


@pytest.fixture
def bad_node(tmp_path, monkeypatch):
    """A ClientApp node whose local copy of the corpus has a non-numeric age on line 6."""
    path = _bad_csv(tmp_path)
    monkeypatch.setattr(
        node, "bundled_run_data", lambda *a: load_csv(path, SCHEMA, use_cache=False)
    )
    client_app._source_data.cache_clear()
    # A corpus split among any K (heart is held by exactly its 4 hospitals); the
    # rows are the patched CSV's two hospitals either way.
    run_config = RunSettings(dataset="synthetic", num_clients=2).to_run_config()
    context = Context(
        run_id=1,
        node_id=7,
        node_config={"partition-id": 0, "num-partitions": 2},
        state=RecordDict(),
        run_config=run_config,
    )
    yield path, context
    client_app._source_data.cache_clear()


def test_the_clientapp_raises_only_the_sanitised_error_and_logs_the_detail_locally(
    bad_node, caplog
):
    path, context = bad_node
    msg = _message("keys", RecordDict({"config": ConfigRecord({})}))
    with caplog.at_level(logging.ERROR, logger="fedpriv.clients.app"):
        with pytest.raises(ClientFailure) as err:
            client_app.app(message=msg, context=context)  # Flower's own dispatch
    exc = err.value
    assert (exc.code, exc.column) == ("not_a_number", "age")
    # What Flower sends the server, in deployment and in simulation (Ray wraps it).
    for reason in (_flower_reason(exc), _flower_reason(ClientAppException(str(exc)))):
        assert "not_a_number" in reason and "'age'" in reason
        _assert_sanitised(reason, path)
    # The traceback Flower logs carries no chained original either.
    assert exc.__cause__ is None and exc.__context__ is None
    # (frames have source line numbers; the DataError's own text must not appear).
    tb = "".join(traceback.format_exception(exc))
    assert SECRET not in tb and "is not a number" not in tb and path.name not in tb
    # The full detail stays on the node.
    local = "\n".join(r.getMessage() for r in caplog.records)
    assert SECRET in local and "line 6" in local


def test_every_query_of_the_clientapp_is_sanitised():
    for name in ("keys", "keybook", "ping", "answer", "consistency", "unmask"):
        fn = getattr(client_app, name)
        assert fn.__wrapped__.__name__ == name  # functools.wraps of ``sanitised``
    context = Context(run_id=1, node_id=7, node_config={}, state=RecordDict(), run_config={})
    msg = _message("keybook", RecordDict({}))
    with pytest.raises(ClientFailure, match=r"^KeyError\(code='client_error'\)$"):
        client_app.keybook(msg, context)  # no partition-id: the key's text stays local
