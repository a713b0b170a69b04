//! `meshwork::Error` as Python exceptions: one class per variant, named
//! as the variant, all subclasses of `meshwork.Error`. The classes live in
//! `meshwork/_errors.py` (Python, so that `InvalidArgument` can also be a
//! `ValueError` and `Timeout` a `TimeoutError`); each carries the
//! variant's fields as attributes, and the variant's message in Python's
//! words (`in_python`): the remedies meshwork's messages give name Rust's
//! API (`Node::timeout`, `ReduceOp::Avg`), which a Python program reaches
//! by other names.

use crate::array::{numpy_name, DType};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The class named `name` in `meshwork._errors`.
fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    ERRORS
        .get_or_try_init(py, || py.import("meshwork._errors").map(Bound::unbind))?
        .bind(py)
        .getattr(name)
}

/// The Python class name of `e`: the variant's name; `Error` (the base)
/// for a variant this module does not know yet.
pub(crate) fn class_name(e: &mw::Error) -> &'static str {
    use mw::Error as E;
    match e {
        E::InvalidArgument(_) => "InvalidArgument",
        E::Timeout { .. } => "Timeout",
        E::PeerDisconnected { .. } => "PeerDisconnected",
        E::RankConflict { .. } => "RankConflict",
        E::ClusterTokenMismatch => "ClusterTokenMismatch",
        E::TokenRequired => "TokenRequired",
        E::TokenTooShort { .. } => "TokenTooShort",
        E::ProtocolMismatch { .. } => "ProtocolMismatch",
        E::WorldMismatch { .. } => "WorldMismatch",
        E::FormationTimeout { .. } => "FormationTimeout",
        E::ConnectionFailed { .. } => "ConnectionFailed",
        E::CollectiveMismatch { .. } => "CollectiveMismatch",
        E::MessageTooLarge { .. } => "MessageTooLarge",
        E::RpcUnknown { .. } => "RpcUnknown",
        E::RpcFailed { .. } => "RpcFailed",
        E::ShutdownIncomplete { .. } => "ShutdownIncomplete",
        E::ShutDown => "ShutDown",
        E::Io(_) => "Io",
        E::Revoked => "Revoked",
        E::GroupShrunk { .. } => "GroupShrunk",
        E::NoQuorum { .. } => "NoQuorum",
        E::Expelled { .. } => "Expelled",
        // A variant added to meshwork after this module was written.
        _ => "Error",
    }
}

/// Rust names in meshwork's messages, each with what a Python program
/// writes instead (an empty one: Python has no such knob, the rest of the
/// sentence says enough). `tests/test_errors.py` checks that no message
/// keeps a `::`.
const IN_PYTHON: &[(&str, &str)] = &[
    (
        "; see Node::timeout / TIMEOUT_S",
        "; if they are only slow, raise the deadline: ProcessGroup.set_timeout(seconds), \
         meshwork.form(timeout=...) or TIMEOUT_S",
    ),
    (
        "give every process a distinct RANK or use Node::join",
        "give every process a distinct RANK, or leave RANK unset for the seed (SEED) to number them",
    ),
    ("see ProcessGroup::failed,", "see ProcessGroup.failed(),"),
    ("(ProcessGroup::rejoin)", "(ProcessGroup.rejoin())"),
    ("(ProcessGroup::grow)", "(ProcessGroup.grow)"),
    (" (Node::heap_bytes)", ""),
    ("set HEAP_MB or Node::heap_bytes", "set HEAP_MB"),
    (" (Node::quorum_unsafe)", ""),
    ("(DISCOVER_HOST or Node::discover_via)", "(DISCOVER_HOST)"),
    (
        "Node::join_running needs the running job's seed (Node::seed or SEED)",
        "meshwork.join_running() needs the running job's seed (SEED)",
    ),
    (
        "Node::join needs a seed (Node::seed or SEED)",
        "a process without RANK needs a seed (SEED)",
    ),
    (
        "joins it with Node::join_running",
        "joins it with meshwork.join_running()",
    ),
];

/// What `ReduceOp::Avg` on an integer type says, before the type's name.
const AVG_ON_INTEGERS: &str = "ReduceOp::Avg needs a float element type, not ";

/// `message`, one of meshwork's, in Python's words: the names of
/// `IN_PYTHON` replaced, and `op="avg"` on an integer dtype named as
/// numpy names it.
fn in_python(message: &str) -> String {
    let mut out = message.to_string();
    for (rust, python) in IN_PYTHON {
        if out.contains(rust) {
            out = out.replace(rust, python);
        }
    }
    if let Some((before, dtype)) = out.split_once(AVG_ON_INTEGERS) {
        let dtype = DType::ALL
            .iter()
            .find(|d| d.name() == dtype)
            .map_or(dtype, |d| numpy_name(*d));
        out = format!("{before}op=\"avg\" needs a float dtype, not {dtype}");
    }
    out
}

/// The exception instance for `e`, its fields set as attributes.
fn exception<'py>(py: Python<'py>, e: &mw::Error) -> PyResult<Bound<'py, PyAny>> {
    use mw::Error as E;
    let cls = class(py, class_name(e))?;
    let message = in_python(&e.to_string());
    let exc = match e {
        // `Io` is also an `OSError`: (errno, strerror) fills in `.errno`.
        E::Io(io) => match io.raw_os_error() {
            Some(errno) => cls.call1((errno, message))?,
            None => cls.call1((message,))?,
        },
        _ => cls.call1((message,))?,
    };
    let set = |name: &str, value: Bound<'py, PyAny>| exc.setattr(name, value);
    match e {
        E::Timeout {
            op,
            waiting_on,
            detail,
        } => {
            set("op", op.into_pyobject(py)?.into_any())?;
            set("waiting_on", waiting_on.into_pyobject(py)?)?;
            set("detail", detail.into_pyobject(py)?.into_any())?;
        }
        E::PeerDisconnected { rank } | E::RankConflict { rank } => {
            set("rank", rank.into_pyobject(py)?.into_any())?;
        }
        E::TokenTooShort { len } => set("length", len.into_pyobject(py)?.into_any())?,
        E::ProtocolMismatch { ours, theirs } | E::WorldMismatch { ours, theirs } => {
            set("ours", ours.into_pyobject(py)?.into_any())?;
            set("theirs", theirs.into_pyobject(py)?.into_any())?;
        }
        E::FormationTimeout { missing } => set("missing", missing.into_pyobject(py)?)?,
        E::ConnectionFailed { rank, reason } => {
            set("rank", rank.into_pyobject(py)?.into_any())?;
            set("reason", reason.into_pyobject(py)?.into_any())?;
        }
        E::CollectiveMismatch {
            op,
            ours,
            theirs,
            rank,
        } => {
            set("op", op.into_pyobject(py)?.into_any())?;
            set("ours", ours.into_pyobject(py)?.into_any())?;
            set("theirs", theirs.into_pyobject(py)?.into_any())?;
            set("rank", rank.into_pyobject(py)?.into_any())?;
        }
        E::MessageTooLarge { len, max } => {
            set("length", len.into_pyobject(py)?.into_any())?;
            set("max", max.into_pyobject(py)?.into_any())?;
        }
        E::RpcUnknown { fn_id, rank } => {
            set("fn_id", fn_id.into_pyobject(py)?.into_any())?;
            set("rank", rank.into_pyobject(py)?.into_any())?;
        }
        E::RpcFailed {
            fn_id,
            rank,
            reason,
        } => {
            set("fn_id", fn_id.into_pyobject(py)?.into_any())?;
            set("rank", rank.into_pyobject(py)?.into_any())?;
            set("reason", reason.into_pyobject(py)?.into_any())?;
        }
        E::ShutdownIncomplete { ranks } => set("ranks", ranks.into_pyobject(py)?)?,
        E::GroupShrunk { failed } => set("failed", failed.into_pyobject(py)?)?,
        E::NoQuorum { reachable, needed } => {
            set("reachable", reachable.into_pyobject(py)?)?;
            set("needed", needed.into_pyobject(py)?.into_any())?;
        }
        E::Expelled { rank } => set("rank", rank.into_pyobject(py)?.into_any())?,
        _ => {}
    }
    Ok(exc)
}

/// `e` as the Python exception to raise.
pub(crate) fn to_py(py: Python<'_>, e: mw::Error) -> PyErr {
    match exception(py, &e) {
        Ok(exc) => PyErr::from_value(exc),
        // meshwork._errors could not be imported or a class called: raise
        // that failure, which says why, rather than lose it.
        Err(failure) => failure,
    }
}

/// `meshwork.InvalidArgument` with `message`.
pub(crate) fn invalid(py: Python<'_>, message: String) -> PyErr {
    to_py(py, mw::Error::InvalidArgument(message))
}

/// One error of every variant, with the name of its variant: the tests
/// check that each becomes its own class (`meshwork._meshwork._error_samples`).
fn samples() -> Vec<(&'static str, mw::Error)> {
    use mw::Error as E;
    vec![
        ("InvalidArgument", E::InvalidArgument("x".into())),
        (
            "Timeout",
            E::Timeout {
                op: "recv".into(),
                waiting_on: vec![1],
                detail: String::new(),
            },
        ),
        ("PeerDisconnected", E::PeerDisconnected { rank: 1 }),
        ("RankConflict", E::RankConflict { rank: 1 }),
        ("ClusterTokenMismatch", E::ClusterTokenMismatch),
        ("TokenRequired", E::TokenRequired),
        ("TokenTooShort", E::TokenTooShort { len: 3 }),
        (
            "ProtocolMismatch",
            E::ProtocolMismatch { ours: 1, theirs: 2 },
        ),
        ("WorldMismatch", E::WorldMismatch { ours: 4, theirs: 2 }),
        (
            "FormationTimeout",
            E::FormationTimeout {
                missing: vec![2, 3],
            },
        ),
        (
            "ConnectionFailed",
            E::ConnectionFailed {
                rank: 1,
                reason: "refused".into(),
            },
        ),
        (
            "CollectiveMismatch",
            E::CollectiveMismatch {
                op: "all_reduce".into(),
                ours: "all_reduce".into(),
                theirs: "broadcast".into(),
                rank: 1,
            },
        ),
        ("MessageTooLarge", E::MessageTooLarge { len: 2, max: 1 }),
        ("RpcUnknown", E::RpcUnknown { fn_id: 7, rank: 1 }),
        (
            "RpcFailed",
            E::RpcFailed {
                fn_id: 7,
                rank: 1,
                reason: "boom".into(),
            },
        ),
        (
            "ShutdownIncomplete",
            E::ShutdownIncomplete { ranks: vec![1] },
        ),
        ("ShutDown", E::ShutDown),
        // errno 111: ECONNREFUSED on Linux; any errno round-trips.
        ("Io", E::Io(std::io::Error::from_raw_os_error(111))),
        ("Revoked", E::Revoked),
        ("GroupShrunk", E::GroupShrunk { failed: vec![2] }),
        (
            "NoQuorum",
            E::NoQuorum {
                reachable: vec![3],
                needed: 3,
            },
        ),
        ("Expelled", E::Expelled { rank: 3 }),
    ]
}

/// `[(variant name, exception instance)]`, one per `meshwork::Error`
/// variant: what a failure of that kind raises. For the tests.
#[pyfunction]
pub(crate) fn _error_samples(py: Python<'_>) -> PyResult<Vec<(&'static str, Bound<'_, PyAny>)>> {
    samples()
        .into_iter()
        .map(|(name, e)| Ok((name, exception(py, &e)?)))
        .collect()
}
