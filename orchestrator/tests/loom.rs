//! Model-checked handshake: every interleaving (up to loom's preemption bound) of a modelled
//! device warp and the host side over one port. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p orchestrator --test loom --release`.
#![cfg(loom)]

use bytemuck::Zeroable;
use loom::sync::Arc;
use loom::thread;
use orchestrator::{Mailbox, ReplyRecord, RequestRecord, Status};

/// What the modelled host answers: the request's first word, doubled, as the chunk base.
fn answer(request: &RequestRecord) -> ReplyRecord {
    let mut reply = ReplyRecord::status(Status::Ok);
    reply.chunk_base = request.words[0] * 2;
    reply.lane_span = u64::from(request.lane_mask);
    reply
}

fn request(word: u64) -> RequestRecord {
    let mut r = RequestRecord::zeroed();
    r.op = 1;
    r.lane_mask = 0x8000_0001;
    r.words[0] = word;
    r.words[31] = word + 1;
    r
}

/// The modelled device: wait for the reply to `seq` on port 0.
fn wait_reply(mailbox: &Mailbox, seq: u32) -> ReplyRecord {
    loop {
        match mailbox.take_reply(0, seq) {
            Some(r) => break r,
            None => thread::yield_now(),
        }
    }
}

/// The modelled host: serve `count` requests on port 0, in order with `answer`, a skipped
/// sequence number with `BadSequence`; every request it reads must be whole.
fn serve(mailbox: &Mailbox, count: usize) {
    let mut served = 0;
    while served < count {
        match mailbox.pending(0) {
            Some(p) if !p.in_order => {
                mailbox.publish_reply(0, p.seq, &ReplyRecord::status(Status::BadSequence));
                served += 1;
            }
            Some(p) => {
                let req = mailbox.read_request(0);
                assert_eq!(req.words[31], req.words[0] + 1, "torn request");
                mailbox.publish_reply(0, p.seq, &answer(&req));
                served += 1;
            }
            None => thread::yield_now(),
        }
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// Two requests in a row: the host sees each request's words whole and the device sees each
/// reply whole and only after it was published.
#[test]
fn post_serve_reply() {
    model(|| {
        let mailbox = Arc::new(Mailbox::new(1).unwrap());
        let host = {
            let mailbox = mailbox.clone();
            thread::spawn(move || serve(&mailbox, 2))
        };
        for (seq, word) in [(1u32, 10u64), (2, 20)] {
            mailbox.post_request(0, seq, &request(word));
            assert_eq!(wait_reply(&mailbox, seq), answer(&request(word)));
        }
        host.join().unwrap();
    });
}

/// A device that skips a sequence number gets `BadSequence` on that number, and the port works
/// again with the next one.
#[test]
fn skipped_sequence_resynchronises() {
    model(|| {
        let mailbox = Arc::new(Mailbox::new(1).unwrap());
        let host = {
            let mailbox = mailbox.clone();
            thread::spawn(move || serve(&mailbox, 2))
        };
        mailbox.post_request(0, 7, &request(1));
        assert_eq!(
            wait_reply(&mailbox, 7),
            ReplyRecord::status(Status::BadSequence)
        );
        mailbox.post_request(0, 8, &request(3));
        assert_eq!(wait_reply(&mailbox, 8), answer(&request(3)));
        host.join().unwrap();
    });
}

/// Shutdown: the host closes, then answers what is pending with `Shutdown`. A waiting device
/// ends with either the real reply or `Shutdown`, never hangs, and never reads a torn reply.
#[test]
fn close_never_strands_a_waiting_warp() {
    model(|| {
        let mailbox = Arc::new(Mailbox::new(1).unwrap());
        let host = {
            let mailbox = mailbox.clone();
            thread::spawn(move || {
                if let Some(p) = mailbox.pending(0) {
                    let req = mailbox.read_request(0);
                    mailbox.publish_reply(0, p.seq, &answer(&req));
                }
                mailbox.close();
                if let Some(p) = mailbox.pending(0) {
                    mailbox.publish_reply(0, p.seq, &ReplyRecord::status(Status::Shutdown));
                }
            })
        };
        mailbox.post_request(0, 1, &request(5));
        let reply = loop {
            if let Some(r) = mailbox.take_reply(0, 1) {
                break r;
            }
            if mailbox.is_closed() {
                break mailbox
                    .take_reply(0, 1)
                    .unwrap_or(ReplyRecord::status(Status::Shutdown));
            }
            thread::yield_now();
        };
        assert!(
            reply == answer(&request(5)) || reply == ReplyRecord::status(Status::Shutdown),
            "{reply:?}"
        );
        host.join().unwrap();
    });
}
