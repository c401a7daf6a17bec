//! The disk spool: every batch is written here before it is sent, and leaves only after the
//! collector has acknowledged it. A collector outage therefore loses nothing, and a `kill -9`
//! of the agent loses at most the batch being built in memory.
//!
//! Layout: segment files `<id>.seg` of records `[len u32][crc32 u32][seq u64][body]` (little
//! endian; the checksum covers seq and body), and a `cursor` file naming the next record to
//! send, replaced atomically. A torn record at the end (a crash mid-write) is cut off on open;
//! a damaged record elsewhere skips the rest of its segment, counted as dropped.
//!
//! Size: the spool holds at most the configured cap, and never more than the filesystem can
//! take while keeping [`Limits::min_free_percent`] of it free. Past that, whole oldest segments
//! are dropped and counted. A write that meets a full disk (ENOSPC, EDQUOT) drops the oldest
//! segments to make room and, when nothing is left to drop, drops the new record: a full disk
//! costs data, never the agent.
//!
//! Invariants (checked by the property test below): the cursor only moves forward; a record
//! is handed out again only until it is committed; a commit for a record whose segment was
//! dropped meanwhile is a no-op; every record appended is delivered, still waiting, or counted
//! in [`Dropped`] exactly once.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const HEADER: u64 = 8;
/// The spool never caps itself below this, whatever the filesystem says.
pub const MIN_CAP_BYTES: u64 = 64 * 1024;

/// Where the next record to send is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    pub segment: u64,
    pub offset: u64,
}

/// A record read from the spool, and the cursor just past it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub body: Vec<u8>,
    pub next: Cursor,
}

/// How large the spool may grow.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The configured cap (`--spool-max-bytes`).
    pub max_bytes: u64,
    /// Share of the filesystem (0–100) the spool always leaves free. The default, 15 %, stays
    /// above the kubelet's default `nodefs.available<10%` eviction threshold, so the spool never
    /// pushes a node into disk-pressure evictions.
    pub min_free_percent: u8,
}

impl Limits {
    pub const DEFAULT_MIN_FREE_PERCENT: u8 = 15;

    pub fn bytes(max_bytes: u64) -> Limits {
        Limits {
            max_bytes,
            min_free_percent: Self::DEFAULT_MIN_FREE_PERCENT,
        }
    }
}

/// Records that left the spool without being delivered, since it was opened, by cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// The spool reached its cap (configured, or what the filesystem allows).
    pub spool_full: u64,
    /// A write met a full filesystem.
    pub disk_full: u64,
    /// A record failed its checksum.
    pub damaged: u64,
}

impl Dropped {
    pub fn total(&self) -> u64 {
        self.spool_full + self.disk_full + self.damaged
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    SpoolFull,
    DiskFull,
}

/// The record handed out by the last [`Spool::peek`] and not committed yet.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    at: Cursor,
    /// Its segment was dropped while it was out: a commit then means it was delivered after
    /// all; the next peek without a commit means it is lost (counted then, once).
    orphaned: Option<Cause>,
}

#[derive(Debug)]
struct Segment {
    id: u64,
    bytes: u64,
}

#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    limits: Limits,
    /// The cap in force: the configured one, or less when the filesystem is short of room.
    cap_bytes: u64,
    segments: VecDeque<Segment>,
    next_segment: u64,
    cursor: Cursor,
    in_flight: Option<InFlight>,
    pub dropped: Dropped,
    /// The last write met a full disk, and no write since has succeeded without making room.
    disk_full: bool,
    /// The filesystem has less free space than the reserve (the spool is capped by it).
    short_of_room: bool,
    /// The cursor file could not be written at the last commit (a restart then sends some
    /// delivered batches again, which the collector recognises as duplicates).
    cursor_unsaved: bool,
}

impl Spool {
    /// Opens (or creates) a spool in `dir` that holds at most `cap_bytes`, leaving the default
    /// share of the filesystem free.
    pub fn open(dir: &Path, cap_bytes: u64) -> anyhow::Result<Spool> {
        Self::open_with(dir, Limits::bytes(cap_bytes))
    }

    pub fn open_with(dir: &Path, limits: Limits) -> anyhow::Result<Spool> {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create spool directory {}: {e}", dir.display()))?;
        let mut ids: Vec<u64> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".seg")?.parse().ok())
            .collect();
        ids.sort_unstable();
        let mut segments = VecDeque::new();
        for id in ids {
            let bytes = std::fs::metadata(seg_path(dir, id))?.len();
            segments.push_back(Segment { id, bytes });
        }
        let limits = Limits {
            max_bytes: limits.max_bytes.max(MIN_CAP_BYTES),
            min_free_percent: limits.min_free_percent.min(100),
        };
        let mut spool = Spool {
            dir: dir.to_owned(),
            limits,
            cap_bytes: limits.max_bytes,
            next_segment: segments.back().map_or(1, |s| s.id + 1),
            segments,
            cursor: Cursor {
                segment: 0,
                offset: 0,
            },
            in_flight: None,
            dropped: Dropped::default(),
            disk_full: false,
            short_of_room: false,
            cursor_unsaved: false,
        };
        spool.cut_torn_tail()?;
        spool.cursor = spool.read_cursor().unwrap_or(Cursor {
            segment: spool.segments.front().map_or(0, |s| s.id),
            offset: 0,
        });
        if let Some(first) = spool.segments.front()
            && spool.cursor.segment < first.id
        {
            spool.cursor = Cursor {
                segment: first.id,
                offset: 0,
            };
        }
        spool.refresh_cap();
        if spool.cap_bytes < spool.limits.max_bytes {
            tracing::warn!(
                cap_bytes = spool.cap_bytes,
                configured_bytes = spool.limits.max_bytes,
                min_free_percent = spool.limits.min_free_percent,
                dir = %dir.display(),
                "the filesystem has less room than the configured spool cap; the spool keeps to what it can take"
            );
        }
        Ok(spool)
    }

    /// Bytes waiting to be sent.
    pub fn backlog_bytes(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| {
                if s.id == self.cursor.segment {
                    s.bytes.saturating_sub(self.cursor.offset)
                } else if s.id > self.cursor.segment {
                    s.bytes
                } else {
                    0
                }
            })
            .sum()
    }

    /// Bytes on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }

    /// The cap in force now (configured, or less when the filesystem is short of room).
    pub fn cap_bytes(&self) -> u64 {
        self.cap_bytes
    }

    /// Whether the filesystem is full for the spool: writes meet ENOSPC, or it has less free
    /// space than the reserve, so the spool keeps below its configured cap.
    pub fn disk_is_full(&self) -> bool {
        self.disk_full || self.short_of_room
    }

    /// Where the next record to send is.
    pub fn cursor(&self) -> Cursor {
        self.cursor
    }

    /// Appends a record; drops the oldest segments past the cap. A full filesystem drops the
    /// oldest segments to make room, and then this record if nothing else can go; it is not an
    /// error. Errors are other I/O failures (permissions, a broken disk).
    pub fn append(&mut self, seq: u64, body: &[u8]) -> anyhow::Result<()> {
        self.refresh_cap();
        let record = encode_record(seq, body);
        let mut made_room = false;
        loop {
            match self.write_tail(&record) {
                Ok(()) => break,
                Err(e) if is_disk_full(&e) => {
                    made_room = true;
                    if !self.disk_full {
                        self.disk_full = true;
                        tracing::error!(error = %e, dir = %self.dir.display(), "disk full: dropping the oldest spooled batches to keep sampling");
                    }
                    let tail_has_records = self.segments.back().is_some_and(|s| s.bytes > 0);
                    if self.segments.len() > 1 || tail_has_records {
                        self.drop_oldest(Cause::DiskFull)?;
                        continue;
                    }
                    // Nothing left to free: this record is the one lost.
                    self.dropped.disk_full += 1;
                    return Ok(());
                }
                Err(e) => return Err(anyhow::anyhow!("cannot write the spool: {e}")),
            }
        }
        if self.disk_full && !made_room {
            self.disk_full = false;
            tracing::info!(dir = %self.dir.display(), "disk has room again: spooling resumed");
        }
        while self.disk_bytes() > self.cap_bytes && self.segments.len() > 1 {
            self.drop_oldest(Cause::SpoolFull)?;
        }
        Ok(())
    }

    /// Writes one encoded record at the end of the newest segment (a new one when it is full).
    /// A failed write leaves no partial record behind.
    fn write_tail(&mut self, record: &[u8]) -> std::io::Result<()> {
        let limit = (self.cap_bytes / 8).clamp(16 * 1024, 8 * 1024 * 1024);
        let needs_new = match self.segments.back() {
            None => true,
            Some(s) => s.bytes > 0 && s.bytes + record.len() as u64 > limit,
        };
        if needs_new {
            let id = self.next_segment;
            File::create(seg_path(&self.dir, id))?;
            self.next_segment += 1;
            self.segments.push_back(Segment { id, bytes: 0 });
            if self.segments.len() == 1 {
                self.cursor = Cursor {
                    segment: id,
                    offset: 0,
                };
            }
        }
        let tail = self.segments.back_mut().expect("a segment");
        let path = seg_path(&self.dir, tail.id);
        let mut f = OpenOptions::new().append(true).open(&path)?;
        if let Err(e) = f.write_all(record) {
            // A short write must not leave a torn record in the middle of the spool.
            let _ = f.set_len(tail.bytes);
            return Err(e);
        }
        tail.bytes += record.len() as u64;
        Ok(())
    }

    /// Drops the oldest segment, counting its records that were not delivered.
    fn drop_oldest(&mut self, cause: Cause) -> anyhow::Result<()> {
        let Some(oldest) = self.segments.pop_front() else {
            return Ok(());
        };
        let path = seg_path(&self.dir, oldest.id);
        let mut lost = if oldest.id < self.cursor.segment {
            0
        } else {
            let from = if oldest.id == self.cursor.segment {
                self.cursor.offset
            } else {
                0
            };
            count_records(&path, from)
        };
        // The record out for delivery is counted only if its delivery fails (next peek).
        if let Some(f) = self.in_flight.as_mut()
            && f.at.segment == oldest.id
            && f.orphaned.is_none()
            && lost > 0
        {
            f.orphaned = Some(cause);
            lost -= 1;
        }
        match cause {
            Cause::SpoolFull => self.dropped.spool_full += lost,
            Cause::DiskFull => self.dropped.disk_full += lost,
        }
        if let Err(e) = std::fs::remove_file(&path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            return Err(anyhow::anyhow!("cannot remove {}: {e}", path.display()));
        }
        if self.cursor.segment <= oldest.id {
            self.cursor = Cursor {
                segment: self.segments.front().map_or(self.next_segment, |s| s.id),
                offset: 0,
            };
            self.save_cursor();
        }
        if lost > 0 {
            tracing::warn!(
                dropped = lost,
                cap_bytes = self.cap_bytes,
                cause = ?cause,
                "spool full: oldest batches dropped"
            );
        }
        Ok(())
    }

    /// The next record to send, if any. Damaged records are skipped (and counted). Until the
    /// record is committed, the next call hands out the same one again (a retry) — unless its
    /// segment was dropped meanwhile, in which case it is counted as dropped now.
    pub fn peek(&mut self) -> anyhow::Result<Option<Record>> {
        self.release();
        if let Some(first) = self.segments.front()
            && self.cursor.segment < first.id
        {
            self.cursor = Cursor {
                segment: first.id,
                offset: 0,
            };
        }
        loop {
            let Some(pos) = self
                .segments
                .iter()
                .position(|s| s.id == self.cursor.segment)
            else {
                return Ok(None);
            };
            let seg = &self.segments[pos];
            let is_last = pos + 1 == self.segments.len();
            if self.cursor.offset >= seg.bytes {
                if is_last {
                    return Ok(None);
                }
                self.cursor = Cursor {
                    segment: self.segments[pos + 1].id,
                    offset: 0,
                };
                continue;
            }
            match read_record(&seg_path(&self.dir, seg.id), self.cursor.offset)? {
                Some((seq, body, size)) => {
                    self.in_flight = Some(InFlight {
                        at: self.cursor,
                        orphaned: None,
                    });
                    return Ok(Some(Record {
                        seq,
                        body,
                        next: Cursor {
                            segment: seg.id,
                            offset: self.cursor.offset + size,
                        },
                    }));
                }
                None => {
                    // Damaged: give up on the rest of this segment.
                    let lost =
                        count_records(&seg_path(&self.dir, seg.id), self.cursor.offset).max(1);
                    self.dropped.damaged += lost;
                    tracing::error!(
                        segment = seg.id,
                        offset = self.cursor.offset,
                        "damaged spool record; rest of the segment skipped"
                    );
                    if is_last {
                        // Start a fresh segment for new records.
                        let bytes = seg.bytes;
                        self.cursor.offset = bytes;
                        return Ok(None);
                    }
                    self.cursor = Cursor {
                        segment: self.segments[pos + 1].id,
                        offset: 0,
                    };
                }
            }
        }
    }

    /// The sender gave up on the record it has out (the delivery failed and will be tried
    /// again). If the record's segment was dropped meanwhile, it is lost now, and counted.
    pub fn release(&mut self) {
        if let Some(f) = self.in_flight.take()
            && let Some(cause) = f.orphaned
        {
            match cause {
                Cause::SpoolFull => self.dropped.spool_full += 1,
                Cause::DiskFull => self.dropped.disk_full += 1,
            }
        }
    }

    /// Marks everything before `next` as delivered. The cursor only moves forward: a commit
    /// for a record that was dropped while it was being sent (its segment is gone) changes
    /// nothing. A cursor file that cannot be written (full disk) is logged, not an error: a
    /// restart then sends a few delivered batches again, which the collector recognises.
    pub fn commit(&mut self, next: Cursor) -> anyhow::Result<()> {
        self.in_flight = None;
        if next <= self.cursor || !self.segments.iter().any(|s| s.id == next.segment) {
            return Ok(());
        }
        self.cursor = next;
        self.save_cursor();
        while let Some(front) = self.segments.front() {
            let done = front.id < next.segment
                || (front.id == next.segment
                    && next.offset >= front.bytes
                    && self.segments.len() > 1);
            if !done {
                break;
            }
            let path = seg_path(&self.dir, front.id);
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                return Err(anyhow::anyhow!("cannot remove {}: {e}", path.display()));
            }
            self.segments.pop_front();
            if let Some(f) = self.segments.front()
                && self.cursor.segment < f.id
            {
                self.cursor = Cursor {
                    segment: f.id,
                    offset: 0,
                };
                self.save_cursor();
            }
        }
        Ok(())
    }

    /// Recomputes the cap in force from the filesystem's free space.
    fn refresh_cap(&mut self) {
        let configured = self.limits.max_bytes;
        let Some(fs) = filesystem_space(&self.dir) else {
            self.cap_bytes = configured;
            return;
        };
        let reserve = fs.total / 100 * u64::from(self.limits.min_free_percent);
        let room = (self.disk_bytes() + fs.available).saturating_sub(reserve);
        self.cap_bytes = configured.min(room).max(MIN_CAP_BYTES);
        let short = fs.available < reserve;
        if short != self.short_of_room {
            self.short_of_room = short;
            if short {
                tracing::warn!(available_bytes = fs.available, reserve_bytes = reserve, cap_bytes = self.cap_bytes, dir = %self.dir.display(), "the state directory's filesystem is below its free-space reserve: the spool shrinks to keep it free");
            } else {
                tracing::info!(
                    available_bytes = fs.available,
                    cap_bytes = self.cap_bytes,
                    "the state directory's filesystem has room again"
                );
            }
        }
    }

    fn read_cursor(&self) -> Option<Cursor> {
        let text = std::fs::read_to_string(self.dir.join("cursor")).ok()?;
        let mut parts = text.split_whitespace();
        Some(Cursor {
            segment: parts.next()?.parse().ok()?,
            offset: parts.next()?.parse().ok()?,
        })
    }

    fn save_cursor(&mut self) {
        let tmp = self.dir.join("cursor.tmp");
        let text = format!("{} {}\n", self.cursor.segment, self.cursor.offset);
        let written = std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, self.dir.join("cursor")));
        match written {
            Ok(()) if self.cursor_unsaved => {
                self.cursor_unsaved = false;
                tracing::info!("spool cursor saved again");
            }
            Ok(()) => {}
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                if !self.cursor_unsaved {
                    self.cursor_unsaved = true;
                    tracing::warn!(error = %e, "cannot save the spool cursor; delivery goes on (after a restart some delivered batches are sent again and recognised as duplicates)");
                }
            }
        }
    }

    /// Cuts an incomplete record off the end of the last segment.
    fn cut_torn_tail(&mut self) -> anyhow::Result<()> {
        let Some(last) = self.segments.back_mut() else {
            return Ok(());
        };
        let path = seg_path(&self.dir, last.id);
        let mut offset = 0;
        while offset < last.bytes {
            match read_record(&path, offset)? {
                Some((_, _, size)) => offset += size,
                None => break,
            }
        }
        if offset < last.bytes {
            tracing::warn!(
                segment = last.id,
                bytes = last.bytes - offset,
                "cutting a torn record off the spool"
            );
            OpenOptions::new()
                .write(true)
                .open(&path)?
                .set_len(offset)?;
            last.bytes = offset;
        }
        Ok(())
    }
}

/// ENOSPC or EDQUOT: the filesystem (or the quota) has no room.
pub fn is_disk_full(e: &std::io::Error) -> bool {
    let code = e.raw_os_error();
    code == Some(rustix::io::Errno::NOSPC.raw_os_error())
        || code == Some(rustix::io::Errno::DQUOT.raw_os_error())
        || e.kind() == std::io::ErrorKind::StorageFull
}

struct FsSpace {
    total: u64,
    available: u64,
}

/// Size and space available to unprivileged writers of the filesystem holding `dir`.
fn filesystem_space(dir: &Path) -> Option<FsSpace> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(FsSpace {
        total: st.f_blocks.saturating_mul(st.f_frsize),
        available: st.f_bavail.saturating_mul(st.f_frsize),
    })
}

fn seg_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.seg"))
}

fn encode_record(seq: u64, body: &[u8]) -> Vec<u8> {
    let len = (body.len() + 8) as u64;
    let mut record = Vec::with_capacity((HEADER + len) as usize);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&seq.to_le_bytes());
    crc.update(body);
    record.extend_from_slice(&(len as u32).to_le_bytes());
    record.extend_from_slice(&crc.finalize().to_le_bytes());
    record.extend_from_slice(&seq.to_le_bytes());
    record.extend_from_slice(body);
    record
}

/// (seq, body, bytes taken) of the record at `offset`, or None if it is incomplete or damaged.
fn read_record(path: &Path, offset: u64) -> anyhow::Result<Option<(u64, Vec<u8>, u64)>> {
    let mut f = File::open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    let mut header = [0u8; HEADER as usize];
    if f.read_exact(&mut header).is_err() {
        return Ok(None);
    }
    let len = u32::from_le_bytes(header[..4].try_into().expect("4")) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().expect("4"));
    if !(8..=256 * 1024 * 1024).contains(&len) {
        return Ok(None);
    }
    let mut payload = vec![0u8; len];
    if f.read_exact(&mut payload).is_err() || crc32fast::hash(&payload) != crc {
        return Ok(None);
    }
    let seq = u64::from_le_bytes(payload[..8].try_into().expect("8"));
    payload.drain(..8);
    Ok(Some((seq, payload, HEADER + len as u64)))
}

/// How many intact records a segment holds from `offset` on.
fn count_records(path: &Path, mut offset: u64) -> u64 {
    let mut n = 0;
    while let Ok(Some((_, _, size))) = read_record(path, offset) {
        offset += size;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        crate::scratch::fresh_dir(&format!("spool-{tag}")).unwrap()
    }

    /// A spool capped at `max_bytes` that ignores the host's free disk space: how full the
    /// test machine's disk is must not decide what these tests see (a CI host at 88 % used
    /// made the default 15 % reserve drop records).
    fn test_spool(d: &Path, max_bytes: u64) -> anyhow::Result<Spool> {
        Spool::open_with(
            d,
            Limits {
                max_bytes,
                min_free_percent: 0,
            },
        )
    }

    fn drain(s: &mut Spool) -> Vec<u64> {
        let mut seqs = Vec::new();
        while let Some(r) = s.peek().unwrap() {
            seqs.push(r.seq);
            s.commit(r.next).unwrap();
        }
        seqs
    }

    #[test]
    fn records_come_back_in_order_and_survive_a_restart() {
        let d = dir("order");
        let mut s = test_spool(&d, 1 << 20).unwrap();
        for seq in 1..=500 {
            s.append(seq, &vec![seq as u8; 300]).unwrap();
        }
        let r = s.peek().unwrap().unwrap();
        assert_eq!((r.seq, r.body.len()), (1, 300));
        s.commit(r.next).unwrap();
        assert!(s.segments.len() > 1, "rotated into several segments");
        // A restart resumes at the cursor: record 1 is not sent again.
        let mut s = test_spool(&d, 1 << 20).unwrap();
        assert_eq!(drain(&mut s), (2..=500).collect::<Vec<_>>());
        assert_eq!(s.backlog_bytes(), 0);
        assert_eq!(s.segments.len(), 1, "delivered segments are deleted");
        s.append(501, b"x").unwrap();
        assert_eq!(drain(&mut s), [501]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_full_spool_drops_the_oldest_and_counts_them() {
        let d = dir("cap");
        let mut s = test_spool(&d, 64 * 1024).unwrap();
        for seq in 1..=200 {
            s.append(seq, &[7u8; 1000]).unwrap();
        }
        assert!(s.disk_bytes() <= 64 * 1024, "{}", s.disk_bytes());
        assert!(s.dropped.total() > 0);
        let kept = drain(&mut s);
        assert_eq!(
            kept.len() as u64 + s.dropped.total(),
            200,
            "every record is either kept or counted as dropped"
        );
        assert_eq!(*kept.last().unwrap(), 200, "the newest are kept");
        assert!(kept.windows(2).all(|w| w[1] == w[0] + 1));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_torn_tail_is_cut_and_a_damaged_record_is_skipped() {
        let d = dir("torn");
        let mut s = test_spool(&d, 1 << 20).unwrap();
        for seq in 1..=3 {
            s.append(seq, b"batch").unwrap();
        }
        drop(s);
        // A crash in the middle of writing record 4.
        let seg = seg_path(&d, 1);
        let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
        f.write_all(&[99, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let mut s = test_spool(&d, 1 << 20).unwrap();
        s.append(4, b"after").unwrap();
        assert_eq!(drain(&mut s), [1, 2, 3, 4]);
        // Flip a byte inside a stored record: it is skipped, not sent.
        s.append(5, b"good").unwrap();
        let before = std::fs::metadata(&seg).unwrap().len();
        s.append(6, b"will be damaged").unwrap();
        let mut bytes = std::fs::read(&seg).unwrap();
        bytes[before as usize + 20] ^= 0xff;
        std::fs::write(&seg, &bytes).unwrap();
        s.segments.back_mut().unwrap().bytes = bytes.len() as u64;
        assert_eq!(drain(&mut s), [5]);
        assert_eq!(s.dropped.total(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_batch_dropped_while_in_flight_is_counted_once_and_its_commit_changes_nothing() {
        let d = dir("inflight");
        let mut s = test_spool(&d, 64 * 1024).unwrap();
        for seq in 1..=20 {
            s.append(seq, &[1u8; 1000]).unwrap();
        }
        let sent = s.peek().unwrap().unwrap();
        assert_eq!(sent.seq, 1);
        // While batch 1 is out, the sampler fills the spool past its cap.
        for seq in 21..=200 {
            s.append(seq, &[1u8; 1000]).unwrap();
        }
        let after_drop = s.cursor();
        assert!(
            after_drop > sent.next,
            "the cursor moved past the dropped segment"
        );
        let dropped = s.dropped.spool_full;
        assert!(dropped > 0);
        // The send succeeds: the commit is stale and must not move the cursor back.
        s.commit(sent.next).unwrap();
        assert_eq!(s.cursor(), after_drop);
        assert_eq!(
            s.dropped.spool_full, dropped,
            "a delivered batch is not a dropped one"
        );
        let rest = drain(&mut s);
        assert_eq!(*rest.last().unwrap(), 200);
        assert_eq!(
            1 + rest.len() as u64 + dropped,
            200,
            "each batch delivered or dropped, once"
        );

        // The same, but the send fails: the batch is lost, and counted when the sender asks
        // for the next one.
        let sent = s.peek().unwrap();
        assert!(sent.is_none());
        for seq in 201..=220 {
            s.append(seq, &[1u8; 1000]).unwrap();
        }
        let out = s.peek().unwrap().unwrap();
        let before = s.dropped.spool_full;
        for seq in 221..=400 {
            s.append(seq, &[1u8; 1000]).unwrap();
        }
        let during = s.dropped.spool_full - before;
        let next = s.peek().unwrap().unwrap();
        assert!(next.seq > out.seq);
        assert_eq!(s.dropped.spool_full - before, during + 1);
        s.commit(next.next).unwrap();
        let rest = drain(&mut s);
        // `next` delivered, the rest drained, the others (batch `out` among them) dropped.
        assert_eq!(
            1 + rest.len() as u64 + (s.dropped.spool_full - before),
            200,
            "{rest:?}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A small deterministic generator (xorshift), so the property test needs no crate.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Random interleavings of appends (which drop the oldest past the cap), sends that
    /// succeed, fail or are refused, and restarts. Invariants: the cursor never moves back
    /// within a run; batches are delivered in order and never twice; every appended batch is
    /// delivered, still waiting at the end, or counted as dropped — exactly one of these.
    #[test]
    fn random_interleavings_keep_the_spool_invariants() {
        for seed in 1..=60u64 {
            let d = dir(&format!("prop-{seed}"));
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut s = test_spool(&d, 64 * 1024).unwrap();
            let mut appended = 0u64;
            let mut delivered: Vec<u64> = Vec::new();
            let mut dropped_before_restarts = 0u64;
            let mut out: Option<Record> = None;
            let mut last_cursor = s.cursor();
            for _ in 0..3000 {
                match rng.below(100) {
                    0..=54 => {
                        appended += 1;
                        let size = 200 + rng.below(1800) as usize;
                        s.append(appended, &vec![appended as u8; size]).unwrap();
                    }
                    55..=74 => out = s.peek().unwrap(),
                    75..=89 => {
                        // The send succeeded.
                        if let Some(r) = out.take() {
                            delivered.push(r.seq);
                            s.commit(r.next).unwrap();
                        }
                    }
                    90..=93 => {
                        // Refused: counted apart by the runner, committed like a delivery.
                        if let Some(r) = out.take() {
                            delivered.push(r.seq);
                            s.commit(r.next).unwrap();
                        }
                    }
                    94..=97 => {
                        // The send failed: the sender will ask again.
                        if out.take().is_some() {
                            s.release();
                        }
                    }
                    _ => {
                        // A restart: what was out is neither delivered nor committed. If its
                        // segment was dropped while it was out, it was only in the sender's
                        // memory, which a restart loses like the batch being built.
                        dropped_before_restarts += s.dropped.total();
                        if let Some(r) = out.take()
                            && !s.segments.iter().any(|g| g.id == r.next.segment)
                        {
                            dropped_before_restarts += 1;
                        }
                        s = test_spool(&d, 64 * 1024).unwrap();
                        last_cursor = s.cursor();
                    }
                }
                assert!(
                    s.cursor() >= last_cursor,
                    "seed {seed}: the cursor moved back"
                );
                last_cursor = s.cursor();
            }
            // A batch still out whose segment was dropped is counted by the drain's first peek.
            drop(out);
            let rest = drain(&mut s);
            delivered.extend(&rest);
            assert!(
                delivered.windows(2).all(|w| w[0] < w[1]),
                "seed {seed}: delivered out of order or twice"
            );
            let dropped = dropped_before_restarts + s.dropped.total();
            assert_eq!(
                delivered.len() as u64 + dropped,
                appended,
                "seed {seed}: {} delivered, {dropped} dropped, {appended} appended",
                delivered.len()
            );
            std::fs::remove_dir_all(&d).unwrap();
        }
    }
}
