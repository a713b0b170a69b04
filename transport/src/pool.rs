//! Reusable message buffers.
//!
//! A large message in a fresh allocation costs a page fault per 4 KiB the
//! first time it is written — measured on `local(4)` with 64 MiB
//! all_reduces, ~300 000 faults for six calls, about 40 % of the time. The
//! pool hands such buffers back out instead. Small buffers are left to the
//! allocator, which is fast for them; the pool's size is bounded, so it
//! never pins more than [`BufferPool::MAX_RETAINED_BYTES`].
//!
//! Pooled buffers are allocated in size classes (eight per power of two, so
//! at most 12.5 % slack): messages of nearly the same size — the segments of
//! a ring over a buffer whose length changes by a few elements — reuse the
//! same buffers instead of each new size adding one.
//!
//! Small buffers (under [`BufferPool::MIN_POOLED_BYTES`]) are kept too, in
//! bins by power of two, a few dozen per bin: a small message's receive
//! then allocates nothing in steady state.

use std::sync::Mutex;

/// A bounded free list of large byte buffers, and bins of small ones.
#[derive(Debug, Default)]
pub struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
    small: Mutex<[Vec<Vec<u8>>; SMALL_BINS]>,
}

/// Bins of small buffers: capacities 2^6 (64 B) … 2^15 (32 KiB).
const SMALL_BINS: usize = 10;
const SMALL_MIN_LOG2: u32 = 6;
/// Buffers kept per small bin (at most about 2 MiB in all).
const SMALL_PER_BIN: usize = 32;

/// The bin whose buffers hold `len` bytes (`len` < 32 KiB).
fn bin_for(len: usize) -> usize {
    let log2 = len.max(1).next_power_of_two().trailing_zeros();
    log2.saturating_sub(SMALL_MIN_LOG2) as usize
}

impl BufferPool {
    /// Buffers smaller than this go to the allocator.
    pub const MIN_POOLED_BYTES: usize = 64 << 10;
    /// At most this many buffers are kept.
    pub const MAX_BUFFERS: usize = 64;
    /// At most this many bytes of capacity are kept.
    pub const MAX_RETAINED_BYTES: usize = 512 << 20;

    /// An empty pool.
    pub fn new() -> BufferPool {
        BufferPool::default()
    }

    /// The capacity a pooled buffer for `len` bytes gets: `len` rounded up
    /// to the next of eight classes per power of two.
    pub fn class(len: usize) -> usize {
        if len <= 8 {
            return len;
        }
        let step = len.next_power_of_two() / 8;
        len.div_ceil(step) * step
    }

    /// An empty buffer with capacity for at least `len` bytes: the smallest
    /// pooled one that fits, or a new one.
    pub fn take(&self, len: usize) -> Vec<u8> {
        let mut buf = self.best_fit(len);
        buf.clear();
        buf
    }

    /// A buffer of exactly `len` bytes with unspecified contents, to be
    /// overwritten by a read. A pooled buffer keeps its old bytes, so
    /// repeated sizes cost no zeroing; only growth is zero-filled.
    pub fn take_filled(&self, len: usize) -> Vec<u8> {
        let mut buf = self.best_fit(len);
        if buf.len() >= len {
            buf.truncate(len);
        } else {
            buf.resize(len, 0);
        }
        buf
    }

    /// The smallest pooled buffer with room for `len` bytes (contents as
    /// left), or a new one: of `len`'s size class if it is large enough to
    /// pool, else of exactly `len`.
    /// An empty buffer for a message of `len` bytes: a pooled one that
    /// holds it whole if there is one, else a new one of at most
    /// `reserve` bytes' capacity (it grows as the message arrives).
    pub fn take_reusing(&self, len: usize, reserve: usize) -> Vec<u8> {
        if len < Self::MIN_POOLED_BYTES {
            return self.take_small(len);
        }
        if let Some(buf) = self.pooled(len) {
            return buf;
        }
        let want = len.min(reserve);
        if want < Self::MIN_POOLED_BYTES {
            return Vec::with_capacity(want);
        }
        Vec::with_capacity(Self::class(want))
    }

    /// An empty buffer of at least `len` (< 64 KiB) bytes' capacity: from
    /// its bin, or new at the bin's size (so that it goes back there).
    fn take_small(&self, len: usize) -> Vec<u8> {
        // Over the largest bin's size (32 KiB): not binned.
        if len > 1 << (SMALL_MIN_LOG2 as usize + SMALL_BINS - 1) {
            return Vec::with_capacity(len);
        }
        let bin = bin_for(len);
        let kept = self.small.lock().unwrap_or_else(|e| e.into_inner())[bin].pop();
        let mut buf =
            kept.unwrap_or_else(|| Vec::with_capacity(1 << (bin as u32 + SMALL_MIN_LOG2)));
        buf.clear();
        buf
    }

    /// Keep a small buffer in the bin its capacity fills, if there is room.
    fn give_small(&self, buf: Vec<u8>) {
        let cap = buf.capacity();
        if cap < 1 << SMALL_MIN_LOG2 {
            return;
        }
        // The largest bin whose size the capacity covers.
        let bin = ((usize::BITS - 1 - cap.leading_zeros()) - SMALL_MIN_LOG2) as usize;
        let mut small = self.small.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = small.get_mut(bin) {
            if b.len() < SMALL_PER_BIN {
                b.push(buf);
            }
        }
    }

    /// The smallest pooled buffer that holds `len` bytes, if any (none
    /// are kept for small sizes).
    fn pooled(&self, len: usize) -> Option<Vec<u8>> {
        if len < Self::MIN_POOLED_BYTES {
            return None;
        }
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let best = free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i)?;
        Some(free.swap_remove(best))
    }

    fn best_fit(&self, len: usize) -> Vec<u8> {
        if len < Self::MIN_POOLED_BYTES {
            return self.take_small(len);
        }
        self.pooled(len)
            .unwrap_or_else(|| Vec::with_capacity(Self::class(len)))
    }

    /// Return a buffer; kept if it is large and the pool has room.
    pub fn give(&self, buf: Vec<u8>) {
        if buf.capacity() < Self::MIN_POOLED_BYTES {
            self.give_small(buf);
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let retained: usize = free.iter().map(Vec::capacity).sum();
        if free.len() < Self::MAX_BUFFERS && retained + buf.capacity() <= Self::MAX_RETAINED_BYTES {
            free.push(buf);
        }
    }

    /// Bytes of capacity held now.
    pub fn retained_bytes(&self) -> usize {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(Vec::capacity)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_sizes_share_a_class() {
        let a = BufferPool::class(1_000_003);
        assert!((1_000_003..=1_000_003 * 9 / 8).contains(&a), "{a}");
        assert_eq!(BufferPool::class(1_000_010), a);
        let pool = BufferPool::new();
        pool.give(pool.take(1_000_003));
        pool.give(pool.take_filled(1_000_017));
        assert_eq!(
            pool.retained_bytes(),
            a,
            "the second size reused the first buffer"
        );
    }

    #[test]
    fn reuses_large_buffers_and_stays_bounded() {
        let pool = BufferPool::new();
        let big = pool.take(1 << 20);
        let ptr = big.as_ptr();
        pool.give(big);
        assert_eq!(pool.retained_bytes(), 1 << 20);
        let again = pool.take(100 << 10);
        assert_eq!(again.as_ptr(), ptr, "the pooled buffer is reused");
        assert!(again.is_empty());
        pool.give(vec![0u8; 10]); // small: binned, not counted here
        assert_eq!(pool.retained_bytes(), 0);
        for _ in 0..BufferPool::MAX_BUFFERS + 10 {
            pool.give(Vec::with_capacity(BufferPool::MIN_POOLED_BYTES));
        }
        assert!(pool.retained_bytes() <= BufferPool::MAX_BUFFERS * BufferPool::MIN_POOLED_BYTES);
        pool.give(Vec::with_capacity(BufferPool::MAX_RETAINED_BYTES));
        assert!(pool.retained_bytes() <= BufferPool::MAX_RETAINED_BYTES);
    }

    #[test]
    fn small_buffers_come_back_from_their_bin() {
        let pool = BufferPool::new();
        let a = pool.take_reusing(100, 1 << 20);
        assert!(a.capacity() >= 100 && a.capacity() == 128);
        let ptr = a.as_ptr();
        pool.give(a);
        let b = pool.take_reusing(70, 1 << 20);
        assert_eq!(b.as_ptr(), ptr, "the 128-byte bin's buffer is reused");
        assert!(b.is_empty());
        // A bin holds a bounded number.
        for _ in 0..100 {
            pool.give(Vec::with_capacity(4096));
        }
        let kept = pool.small.lock().unwrap()[bin_for(4096)].len();
        assert_eq!(kept, SMALL_PER_BIN);
        // Odd capacities go to the largest bin they cover; tiny ones to none.
        pool.give(Vec::with_capacity(200));
        assert_eq!(pool.small.lock().unwrap()[bin_for(128)].len(), 1);
        pool.give(Vec::with_capacity(10));
        assert!(pool.take_reusing(0, 1).capacity() >= 1);
        // Every size under the pooled minimum, the bins' edges included.
        for len in [32 << 10, (32 << 10) + 1, 40_000, (64 << 10) - 1] {
            let buf = pool.take_reusing(len, 1 << 20);
            assert!(buf.capacity() >= len, "{len}");
            pool.give(buf);
        }
        drop(b);
    }
}
