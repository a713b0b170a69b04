//! Federated rounds from Python (`src/group/rounds.rs`): rank 0 runs
//! `g.round(model, deadline, min_updates)` on a float32 array, updated in
//! place; a worker takes `g.next_round()`'s `meshwork.Offer` and answers
//! it with `g.submit_update(offer, update, weight)`. Reports and outcomes
//! are dicts. Every call blocks with the GIL released.

use crate::array::{array, Access};
use crate::group::ProcessGroup;
use crate::more::{float32, float32_array, seconds_arg, weight_arg};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A round offered to this worker: its number and the model it starts
/// from (`model`, a float32 numpy copy). Answer it with `submit_update`.
#[pyclass(frozen, module = "meshwork", name = "Offer")]
pub(crate) struct Offer {
    inner: mw::Offer,
}

#[pymethods]
impl Offer {
    /// The round's number.
    #[getter]
    fn round(&self) -> u64 {
        self.inner.round
    }

    /// A secure round's threshold (None: a plain round); `submit_update`
    /// runs its steps by itself.
    #[getter]
    fn threshold(&self) -> Option<u32> {
        self.inner.threshold
    }

    /// The model the round starts from: a float32 numpy array (a copy).
    #[getter]
    fn model<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        float32_array(py, &self.inner.model)
    }

    fn __repr__(&self) -> String {
        format!(
            "<meshwork.Offer round {} of {} floats>",
            self.inner.round,
            self.inner.model.len()
        )
    }
}

fn report<'py>(py: Python<'py>, r: &mw::RoundReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("round", r.round)?;
    d.set_item("participants", r.participants.clone())?;
    d.set_item("late", r.late.clone())?;
    d.set_item("total_weight", r.total_weight)?;
    d.set_item("applied", r.applied)?;
    Ok(d)
}

#[pymethods]
impl ProcessGroup {
    /// Run one federated round (rank 0): offer the float32 array `model`
    /// to every worker present, wait `deadline` seconds or until every
    /// one offered has answered, and, if at least `min_updates` did,
    /// replace `model` in place with the weighted average of exactly
    /// their updates. Returns `{"round", "participants", "late",
    /// "total_weight", "applied"}`. A late or absent worker never fails
    /// the call or the group. `secure=t` (at least 2) makes it a secure
    /// round: this rank learns only the participants' weighted sum, as
    /// long as fewer than `t` workers collude with it.
    #[pyo3(signature = (model, deadline, min_updates = 1, secure = 0))]
    fn round<'py>(
        &self,
        py: Python<'py>,
        model: &Bound<'_, PyAny>,
        deadline: f64,
        min_updates: u32,
        secure: u32,
    ) -> PyResult<Bound<'py, PyDict>> {
        let deadline = seconds_arg(py, deadline)?;
        let mut a = array(model, "model", Access::Update)?;
        float32(py, &a, "round")?;
        let buf = a.slice_mut::<f32>();
        let config = mw::RoundConfig {
            deadline,
            min_updates,
        };
        let r = self.blocking(py, |g| {
            let mut c = g.round_coordinator(config)?;
            match secure {
                0 => c.round(buf),
                t => c.secure_round(buf, t),
            }
        })?;
        a.write_back()?;
        report(py, &r)
    }

    /// End the rounds (rank 0): every worker's `next_round` returns None.
    fn finish_rounds(&self, py: Python<'_>) -> PyResult<()> {
        let config = mw::RoundConfig {
            deadline: std::time::Duration::from_secs(1),
            min_updates: 1,
        };
        self.blocking(py, |g| g.round_coordinator(config)?.finish())
    }

    /// The newest round offered to this worker (`meshwork.Offer`), waiting
    /// at most `timeout` seconds; None once rank 0 has ended the rounds.
    #[pyo3(signature = (timeout = 60.0))]
    fn next_round(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<Offer>> {
        let timeout = seconds_arg(py, timeout)?;
        let offer = self.blocking(py, |g| g.round_participant()?.next_round(timeout))?;
        Ok(offer.map(|inner| Offer { inner }))
    }

    /// Answer `offer` with the float32 array `update` (as long as its
    /// model) and `weight` (positive), and wait for what became of it: a
    /// dict with `"outcome"` — `"done"` (with `"model"`, the round's
    /// average, and the report's keys), `"late"`, `"too_few"` (with
    /// `"arrived"` and `"min"`) or `"refused"` (with `"reason"`) — and
    /// `"round"`.
    fn submit_update<'py>(
        &self,
        py: Python<'py>,
        offer: &Offer,
        update: &Bound<'_, PyAny>,
        weight: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let a = array(update, "update", Access::Read)?;
        float32(py, &a, "submit_update")?;
        let weight = weight_arg(py, weight, "submit_update")?;
        let values = a.slice::<f32>();
        let outcome = self.blocking(py, |g| {
            g.round_participant()?.submit(&offer.inner, values, weight)
        })?;
        let d = PyDict::new(py);
        match outcome {
            mw::RoundOutcome::Done { model, report: r } => {
                d.set_item("outcome", "done")?;
                d.update(report(py, &r)?.as_mapping())?;
                d.set_item("model", float32_array(py, &model)?)?;
            }
            mw::RoundOutcome::Late { round } => {
                d.set_item("outcome", "late")?;
                d.set_item("round", round)?;
            }
            mw::RoundOutcome::TooFew {
                round,
                arrived,
                min,
            } => {
                d.set_item("outcome", "too_few")?;
                d.set_item("round", round)?;
                d.set_item("arrived", arrived)?;
                d.set_item("min", min)?;
            }
            mw::RoundOutcome::Refused { round, reason } => {
                d.set_item("outcome", "refused")?;
                d.set_item("round", round)?;
                d.set_item("reason", reason)?;
            }
            other => {
                d.set_item("outcome", format!("{other:?}"))?;
            }
        }
        Ok(d)
    }
}
