//! Host memory standing in for device buffers, and a local world to run
//! staged calls on: the staging tests' fixtures.

use super::{Sink, Source};
use crate::{Element, Error, ProcessGroup, Result};
use std::sync::{Arc, Mutex};

/// What a [`Host`] was asked to do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Down(usize, usize),
    Up(usize, usize),
}

/// Host memory standing in for a device buffer: it records every copy
/// and can be told to fail one.
pub(super) struct Host<T> {
    pub(super) data: Vec<T>,
    pub(super) log: Arc<Mutex<Vec<Step>>>,
    pub(super) fail_down_at: Option<usize>,
}

impl<T: Copy> Host<T> {
    pub(super) fn new(data: Vec<T>) -> Host<T> {
        Host {
            data,
            log: Arc::default(),
            fail_down_at: None,
        }
    }
    pub(super) fn steps(&self) -> Vec<Step> {
        self.log.lock().unwrap().clone()
    }
}

impl<T: Copy> Source<T> for Host<T> {
    fn len(&self) -> usize {
        self.data.len()
    }
    fn download(&mut self, at: usize, into: &mut [T]) -> Result<()> {
        if self.fail_down_at == Some(at) {
            return Err(Error::DeviceFailed {
                op: "test".into(),
                what: format!("a copy out at {at}"),
            });
        }
        self.log.lock().unwrap().push(Step::Down(at, into.len()));
        into.copy_from_slice(&self.data[at..at + into.len()]);
        Ok(())
    }
}

impl<T: Copy> Sink<T> for Host<T> {
    fn upload(&mut self, at: usize, from: &[T]) -> Result<()> {
        self.log.lock().unwrap().push(Step::Up(at, from.len()));
        self.data[at..at + from.len()].copy_from_slice(from);
        Ok(())
    }
}

/// The pieces (offset, length) copied back (`up`) or out, in order.
pub(super) fn pieces(steps: &[Step], up: bool) -> Vec<(usize, usize)> {
    steps
        .iter()
        .filter_map(|s| match (s, up) {
            (Step::Down(at, len), false) | (Step::Up(at, len), true) => Some((*at, *len)),
            _ => None,
        })
        .collect()
}

pub(super) fn bufs<T: Element>(count: usize, len: usize) -> Vec<Vec<T>> {
    (0..count)
        .map(|_| vec![bytemuck::Zeroable::zeroed(); len])
        .collect()
}

/// Each rank of a local world runs `f(rank, group)`; the results in
/// rank order.
pub(super) fn on_world<R: Send>(world: u32, f: impl Fn(u32, &ProcessGroup) -> R + Sync) -> Vec<R> {
    crate::local::on_world(world, |g| f(g.rank(), g))
}
