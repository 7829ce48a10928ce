//! `records.h` (built as host C++) against `orchestrator::records`: sizes, field offsets, codes.

use std::mem::{offset_of, size_of};

use orchestrator::records::{
    CONTIGUOUS_LAYOUT, DeviceMailbox, LaneStatus, Op, ReplyRecord, RequestRecord, Status,
};

fn check(which: u32, size: usize, offsets: &[usize]) {
    assert_eq!(
        hostcheck::record_layout(which, 99),
        Some(size as u64),
        "size of record {which}"
    );
    for (field, &offset) in offsets.iter().enumerate() {
        assert_eq!(
            hostcheck::record_layout(which, field as u32),
            Some(offset as u64),
            "record {which} field {field}"
        );
    }
    assert_eq!(
        hostcheck::record_layout(which, offsets.len() as u32),
        None,
        "record {which} has more fields in C++"
    );
}

#[test]
fn request_record_matches() {
    check(
        0,
        size_of::<RequestRecord>(),
        &[
            offset_of!(RequestRecord, op),
            offset_of!(RequestRecord, lane_mask),
            offset_of!(RequestRecord, warp),
            offset_of!(RequestRecord, reserved),
            offset_of!(RequestRecord, words),
        ],
    );
}

#[test]
fn reply_record_matches() {
    check(
        1,
        size_of::<ReplyRecord>(),
        &[
            offset_of!(ReplyRecord, status),
            offset_of!(ReplyRecord, size_class),
            offset_of!(ReplyRecord, tile_log2),
            offset_of!(ReplyRecord, layout),
            offset_of!(ReplyRecord, chunk_base),
            offset_of!(ReplyRecord, lane_span),
            offset_of!(ReplyRecord, reserved),
            offset_of!(ReplyRecord, failed_lanes),
            offset_of!(ReplyRecord, lane_status),
        ],
    );
}

#[test]
fn device_mailbox_matches() {
    check(
        2,
        size_of::<DeviceMailbox>(),
        &[
            offset_of!(DeviceMailbox, ports),
            offset_of!(DeviceMailbox, reserved),
            offset_of!(DeviceMailbox, req_seq),
            offset_of!(DeviceMailbox, requests),
            offset_of!(DeviceMailbox, ack_seq),
            offset_of!(DeviceMailbox, replies),
            offset_of!(DeviceMailbox, closed),
            offset_of!(DeviceMailbox, locks),
        ],
    );
}

#[test]
fn codes_match() {
    let mut rust: Vec<u64> = [Op::Alloc, Op::AllocContiguous, Op::Free, Op::FreePointer]
        .iter()
        .map(|&o| o as u64)
        .collect();
    rust.extend(Status::ALL.iter().map(|&s| s as u64));
    rust.extend(LaneStatus::ALL.iter().map(|&s| s as u64));
    rust.push(u64::from(CONTIGUOUS_LAYOUT));
    assert_eq!(hostcheck::codes(), rust);
}
