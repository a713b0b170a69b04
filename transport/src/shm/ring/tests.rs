//! The ring's unit tests: records across the end, reads in pieces, room
//! given back, a hostile producer's words, the bells.

use super::*;

const BOUND: &[u8] = b"a link's ring key";

/// Read, then give the room back.
fn take(a: &Segment, cur: &mut Cursor, dst: &mut [u8]) -> Result<usize, Corrupt> {
    let n = a.read(cur, dst)?;
    a.free(cur);
    Ok(n)
}

/// A segment, and the peer's mapping of it.
fn pair() -> (Segment, Segment) {
    let a = Segment::create(MIN_CAPACITY, BOUND).expect("create");
    let b = Segment::open(a.locator().expect("offered"), MIN_CAPACITY, BOUND).expect("open");
    (a, b)
}

#[test]
fn bytes_wrap_around_the_end_of_the_ring() {
    let (mut a, b) = pair();
    a.withdraw();
    let (mut head, mut cur) = (0u64, Cursor::default());
    // Step through every offset class of a wrap: records of a prime
    // length never line up with the end, and are read in pieces of
    // another prime.
    let msg: Vec<u8> = (0..7919u32).map(|i| (i * 31 % 251) as u8).collect();
    for round in 0..100 {
        let n = b.write(&mut head, &msg).expect("write");
        assert_eq!(n, msg.len(), "room in round {round}");
        b.publish(head, None);
        let mut got = vec![0u8; msg.len()];
        let mut have = 0;
        while have < got.len() {
            let end = (have + 997).min(got.len());
            let n = take(&a, &mut cur, &mut got[have..end]).expect("read");
            assert!(n > 0, "round {round}: published bytes unread");
            have += n;
        }
        assert_eq!(got, msg, "round {round}");
    }
    assert_eq!(a.has_unread(), Ok(false));
    assert_eq!(a.read(&mut cur, &mut [0u8; 8]), Ok(0));
}

#[test]
fn a_read_runs_on_across_records_and_stops_at_one_unpublished() {
    let (a, b) = pair();
    let (mut head, mut cur) = (0u64, Cursor::default());
    for piece in [&b"one"[..], b"two", b"three"] {
        b.write(&mut head, piece).expect("write");
        b.publish(head, None);
    }
    // Written, not published: not there yet.
    b.write(&mut head, b"four").expect("write");
    let mut got = [0u8; 64];
    assert_eq!(a.read(&mut cur, &mut got), Ok(11));
    assert_eq!(&got[..11], b"onetwothree");
    assert_eq!(a.has_unread(), Ok(false));
    b.publish(head, None);
    assert_eq!(a.has_unread(), Ok(true));
    assert_eq!(a.read(&mut cur, &mut got[..2]), Ok(2));
    assert_eq!(a.has_unread(), Ok(true), "inside a record");
    assert_eq!(a.read(&mut cur, &mut got[2..]), Ok(2));
    assert_eq!(&got[..4], b"four");
}

#[test]
fn a_small_frame_is_one_cache_line() {
    let (a, b) = pair();
    let mut head = 0;
    // A 40-byte header and an 8-byte payload: mark, length and bytes
    // fill the line, and the next record starts on the next.
    b.write(&mut head, &[1u8; 40]).expect("header");
    b.write(&mut head, &[2u8; 8]).expect("payload");
    b.publish(head, None);
    assert_eq!(head, LINE);
    b.write(&mut head, &[3u8; 1]).expect("next");
    assert_eq!(head, LINE + RECORD + 1);
    b.publish(head, None);
    let mut got = [0u8; 49];
    assert_eq!(a.read(&mut Cursor::default(), &mut got), Ok(49));
    assert_eq!(got[48], 3);
}

#[test]
fn a_full_ring_takes_nothing_until_read() {
    let (a, b) = pair();
    let mut head = 0;
    let big = vec![7u8; MIN_CAPACITY + 10];
    let first = MIN_CAPACITY - RECORD as usize;
    assert_eq!(b.write(&mut head, &big), Ok(first));
    assert_eq!(b.write(&mut head, &big), Ok(0));
    assert_eq!(b.want_room(head), Ok(0), "the producer waits");
    b.publish(head, None);
    let mut cur = Cursor::default();
    let mut out = vec![0u8; 100];
    assert_eq!(a.read(&mut cur, &mut out), Ok(100));
    assert_eq!(b.room(head), Ok(0), "read, not yet given back");
    assert!(a.free(&cur), "room given back: wake the producer");
    assert!(!a.free(&cur), "woken once per wait");
    // Freed: the record's words and 100 bytes; the next record's
    // words go where the first's were.
    assert_eq!(b.room(head), Ok(100));
    // The producer's own idea of the room (from the tail it saw when
    // the ring filled) was none: it looks again, and takes exactly the
    // room freed, no more.
    assert_eq!(b.write(&mut head, &[9u8; 150]), Ok(100));
    assert_eq!(b.write(&mut head, &[9u8; 1]), Ok(0));
    b.publish(head, None);
    let mut rest = vec![0u8; MIN_CAPACITY];
    assert_eq!(take(&a, &mut cur, &mut rest), Ok(first));
    assert!(rest[..first - 100].iter().all(|&x| x == 7));
    assert!(rest[first - 100..first].iter().all(|&x| x == 9));
}

#[test]
fn room_the_producer_saw_is_used_without_looking_again() {
    let (a, b) = pair();
    let (mut head, mut cur) = (0u64, Cursor::default());
    assert_eq!(b.write(&mut head, &[1u8; 64]), Ok(64));
    b.publish(head, None);
    let mut out = [0u8; 64];
    assert_eq!(take(&a, &mut cur, &mut out), Ok(64));
    // A consumer word that lies is not looked at while the room the
    // producer knows of suffices; once it does not, the lie is seen.
    a.control().tail.0.store(head + 1000, Ordering::SeqCst);
    assert_eq!(b.write(&mut head, &[2u8; 64]), Ok(64));
    assert_eq!(b.write(&mut head, &vec![3u8; MIN_CAPACITY]), Err(Corrupt));
}

#[test]
fn a_record_longer_than_the_ring_or_empty_is_corrupt() {
    let (a, b) = pair();
    // A hostile producer marks a record at the consumer's next line
    // and claims more than the ring holds, or nothing.
    let mut out = [0u8; 8];
    b.word(0).store(b.mark(0), Ordering::SeqCst);
    b.word(8).store(MIN_CAPACITY as u64, Ordering::SeqCst);
    assert_eq!(a.has_unread(), Err(Corrupt));
    assert_eq!(a.read(&mut Cursor::default(), &mut out), Err(Corrupt));
    b.word(8).store(0, Ordering::SeqCst);
    assert_eq!(a.read(&mut Cursor::default(), &mut out), Err(Corrupt));
    // A mark for another position (an old lap's) is no record.
    b.word(0)
        .store(b.mark(MIN_CAPACITY as u64), Ordering::SeqCst);
    b.word(8).store(5, Ordering::SeqCst);
    assert_eq!(a.has_unread(), Ok(false));
    assert_eq!(a.read(&mut Cursor::default(), &mut out), Ok(0));
}

#[test]
fn whatever_a_hostile_producer_writes_the_consumer_reads_bytes_or_refuses() {
    let (a, b) = pair();
    // xorshift64, fixed seed: reproducible.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let cap = MIN_CAPACITY as u64;
    let (mut reads, mut refusals) = (0, 0);
    for round in 0..2000 {
        let mut cur = Cursor::default();
        // Garbage over the first lines, some of it well-formed marks
        // (the producer knows the salt) with lengths of any size.
        for w in 0..64u64 {
            let at = w * 8;
            let v = match next() % 4 {
                0 => b.mark(at),
                1 => next() % (cap * 2),
                _ => next(),
            };
            b.word(at).store(v, Ordering::Relaxed);
        }
        a.control().tail.0.store(next(), Ordering::Relaxed);
        let mut out = vec![0u8; (next() % 4096) as usize + 1];
        let mut total = 0u64;
        for _ in 0..8 {
            match (a.has_unread(), a.read(&mut cur, &mut out)) {
                (_, Err(Corrupt)) => {
                    refusals += 1;
                    break;
                }
                (_, Ok(n)) => {
                    assert!(n <= out.len(), "round {round}");
                    reads += usize::from(n > 0);
                    total += n as u64;
                }
            }
            a.free(&cur);
        }
        // Never more than the ring holds per record read, whatever the
        // words claim.
        assert!(total <= 8 * cap, "round {round}: {total}");
    }
    // Both ways were taken, many times.
    assert!(
        reads > 100 && refusals > 100,
        "{reads} reads, {refusals} refusals"
    );
}

#[test]
fn a_bell_is_asked_for_only_while_the_reader_sleeps_and_no_caller_reads() {
    let (a, b) = pair();
    let mut head = 0;
    b.write(&mut head, b"x").expect("write");
    assert!(!b.publish(head, None), "the reader is awake");
    let mut cur = Cursor::default();
    let mut one = [0u8; 1];
    a.read(&mut cur, &mut one).expect("read");
    assert!(!a.set_asleep(true), "nothing to read");
    b.write(&mut head, b"y").expect("write");
    assert!(b.publish(head, None), "asleep: ring");
    assert!(!b.publish(head, None), "rung once per sleep");
    assert!(a.set_asleep(true), "something to read: do not sleep");
    a.caller_reads(true);
    assert!(!b.publish(head, None), "a caller reads");
    assert!(a.caller_reads(false), "left unread: the caller reads it");
}

#[test]
fn a_message_rings_only_if_a_thread_waits_for_its_kind() {
    let (a, b) = pair();
    let mut head = 0;
    assert!(!a.set_asleep(true));
    b.write(&mut head, b"p2p").expect("write");
    assert!(
        !b.publish(head, Some(1)),
        "nobody waits: it stays in the ring"
    );
    assert!(
        a.want(0, true),
        "parking with bytes unread: read them first"
    );
    assert!(!b.publish(head, Some(1)), "a wait for another kind");
    assert!(b.publish(head, Some(0)), "a wait for this kind: ring");
    assert!(!a.want(0, false));
    assert!(!a.set_asleep(false));
    assert!(a.set_asleep(true), "still unread");
    assert!(b.publish(head, None), "urgent: rings whoever waits");
}

#[test]
fn a_segment_not_private_sealed_or_bound_to_this_link_is_refused() {
    // A binding of this test's own: a descriptor number freed here and
    // reused by another test's segment is never this one's.
    const BOUND: &[u8] = b"the refusals test's ring key";
    let a = Segment::create(MIN_CAPACITY, BOUND).expect("create");
    let at = a.locator().expect("offered");
    let fd = at.1 as libc::c_int;
    // SAFETY: this test's own open descriptor.
    assert_eq!(unsafe { libc::fchmod(fd, 0o644) }, 0);
    let e = Segment::open(at, MIN_CAPACITY, BOUND).expect_err("0644 is refused");
    assert!(e.to_string().contains("private"), "{e}");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::fchmod(fd, 0o600) }, 0);
    let e = Segment::open(at, MIN_CAPACITY * 2, BOUND).expect_err("wrong size");
    assert!(e.to_string().contains("size"), "{e}");
    let e = Segment::open(at, MIN_CAPACITY, b"another link").expect_err("another key");
    assert!(e.to_string().contains("not bound"), "{e}");
    // A heap region is not a ring, whatever its binding.
    let heap = crate::SharedRegion::create((DATA_AT + MIN_CAPACITY) / 8, BOUND).expect("heap");
    let e =
        Segment::open(heap.locator().expect("offered"), MIN_CAPACITY, BOUND).expect_err("a heap");
    assert!(e.to_string().contains("not bound"), "{e}");
    assert!(Segment::open(at, MIN_CAPACITY, BOUND).is_ok());
    let mut a = a;
    a.withdraw();
    assert!(Segment::open(at, MIN_CAPACITY, BOUND).is_err(), "withdrawn");
}
