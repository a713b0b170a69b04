//! `meshwork._meshwork`, the extension module behind the Python package
//! `meshwork` (`ffi/python/python/meshwork`): groups from the environment
//! or in-process, every collective, send/recv and shutdown on numpy arrays
//! (used in place) and CPU torch tensors (through a checked copy: see
//! `array.rs`; in place with `set_torch_in_place`), with the GIL released
//! while a call blocks. The contract is DESIGN.md, "C ABI and Python"; the
//! Python-facing reference is the docstrings and `_meshwork.pyi`.

mod array;
mod errors;
mod form;
mod group;
mod interrupt;
mod more;
mod nb;
mod rounds;

use errors::to_py;
use group::ProcessGroup;
pub(crate) use mw::with_dtype;
use pyo3::prelude::*;

/// Join the group the environment describes (RANK, WORLD, PEERS, SEED,
/// CLUSTER_TOKEN, TRANSPORT, TIMEOUT_S, ... as `meshrun` sets them):
/// `Node::from_env().connect()`. Blocks, with the GIL released, until
/// every rank has joined or the formation deadline passes
/// (`meshwork.FormationTimeout`); Ctrl-C raises `KeyboardInterrupt` at
/// once.
#[pyfunction]
fn connect(py: Python<'_>) -> PyResult<ProcessGroup> {
    let node = mw::Node::from_env().map_err(|e| to_py(py, e))?;
    let inner = interrupt::abandonable(py, move || node.connect())?;
    Ok(ProcessGroup { inner })
}

/// A new process for a running job (SEED and CLUSTER_TOKEN from the
/// environment, RANK and WORLD ignored): `Node::join_running().connect()`.
/// Blocks, with the GIL released, until the job's members call `grow`
/// and the grown group has formed, or the deadline passes.
#[pyfunction]
fn join_running(py: Python<'_>) -> PyResult<ProcessGroup> {
    let node = mw::Node::join_running();
    let inner = interrupt::abandonable(py, move || node.connect())?;
    Ok(ProcessGroup { inner })
}

/// A world of `n` ranks inside this process: a list of `n` groups, rank r
/// at index r. Drive each from its own thread, as ranks in separate
/// processes would be; for tests and examples.
#[pyfunction]
fn local(py: Python<'_>, n: i64) -> PyResult<Vec<ProcessGroup>> {
    let n = u32::try_from(n)
        .map_err(|_| errors::invalid(py, format!("local: {n} is not a number of ranks")))?;
    let world = mw::local(n).map_err(|e| to_py(py, e))?;
    Ok(world
        .into_iter()
        .map(|inner| ProcessGroup { inner })
        .collect())
}

#[pymodule]
fn _meshwork(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ProcessGroup>()?;
    m.add_class::<nb::Work>()?;
    m.add_class::<form::Listener>()?;
    m.add_class::<more::Compressor>()?;
    m.add_class::<rounds::Offer>()?;
    m.add_function(wrap_pyfunction!(form::form, m)?)?;
    m.add_function(wrap_pyfunction!(form::random_token, m)?)?;
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add_function(wrap_pyfunction!(local, m)?)?;
    m.add_function(wrap_pyfunction!(join_running, m)?)?;
    m.add_function(wrap_pyfunction!(errors::_error_samples, m)?)?;
    m.add_function(wrap_pyfunction!(group::_rust_all_reduce_loop, m)?)?;
    m.add_function(wrap_pyfunction!(array::set_torch_in_place, m)?)?;
    m.add_function(wrap_pyfunction!(array::torch_in_place, m)?)?;
    m.add_function(wrap_pyfunction!(array::_torch_copies, m)?)?;
    array::in_place_from_env(m.py())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
