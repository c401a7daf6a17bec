//! The disk spool: every batch is written here before it is sent, and leaves only after the
//! collector has acknowledged it. A collector outage therefore loses nothing, and a `kill -9`
//! of the agent loses at most the batch being built in memory.
//!
//! Layout: segment files `<id>.seg` of records `[len u32][crc32 u32][seq u64][body]` (little
//! endian; the checksum covers seq and body), and a `cursor` file naming the next record to
//! send, replaced atomically. When the spool would grow past its cap, whole oldest segments
//! are dropped and counted. A torn record at the end (a crash mid-write) is cut off on open;
//! a damaged record elsewhere skips the rest of its segment, counted as dropped.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const HEADER: u64 = 8;

/// Where the next record to send is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

#[derive(Debug)]
struct Segment {
    id: u64,
    bytes: u64,
}

#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    cap_bytes: u64,
    segment_bytes: u64,
    segments: VecDeque<Segment>,
    cursor: Cursor,
    /// Records dropped because the spool was full or damaged, since open.
    pub dropped_records: u64,
}

impl Spool {
    /// Opens (or creates) a spool in `dir` that holds at most `cap_bytes`.
    pub fn open(dir: &Path, cap_bytes: u64) -> anyhow::Result<Spool> {
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
        let cap_bytes = cap_bytes.max(64 * 1024);
        let mut spool = Spool {
            dir: dir.to_owned(),
            cap_bytes,
            segment_bytes: (cap_bytes / 8).clamp(16 * 1024, 8 * 1024 * 1024),
            segments,
            cursor: Cursor {
                segment: 0,
                offset: 0,
            },
            dropped_records: 0,
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

    /// Appends a record; drops the oldest segments if the cap would be exceeded.
    pub fn append(&mut self, seq: u64, body: &[u8]) -> anyhow::Result<()> {
        let len = (body.len() + 8) as u64;
        let needs_new = match self.segments.back() {
            None => true,
            Some(s) => s.bytes > 0 && s.bytes + HEADER + len > self.segment_bytes,
        };
        if needs_new {
            let id = self.segments.back().map_or(1, |s| s.id + 1);
            File::create(seg_path(&self.dir, id))?;
            self.segments.push_back(Segment { id, bytes: 0 });
            if self.segments.len() == 1 {
                self.cursor = Cursor {
                    segment: id,
                    offset: 0,
                };
            }
        }
        let tail = self.segments.back_mut().expect("a segment");
        let mut record = Vec::with_capacity(HEADER as usize + len as usize);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&seq.to_le_bytes());
        crc.update(body);
        record.extend_from_slice(&(len as u32).to_le_bytes());
        record.extend_from_slice(&crc.finalize().to_le_bytes());
        record.extend_from_slice(&seq.to_le_bytes());
        record.extend_from_slice(body);
        let mut f = OpenOptions::new()
            .append(true)
            .open(seg_path(&self.dir, tail.id))?;
        f.write_all(&record)?;
        tail.bytes += record.len() as u64;
        while self.disk_bytes() > self.cap_bytes && self.segments.len() > 1 {
            let oldest = self.segments.pop_front().expect("more than one");
            let unsent = if oldest.id < self.cursor.segment {
                0
            } else {
                let from = if oldest.id == self.cursor.segment {
                    self.cursor.offset
                } else {
                    0
                };
                count_records(&seg_path(&self.dir, oldest.id), from)
            };
            self.dropped_records += unsent;
            std::fs::remove_file(seg_path(&self.dir, oldest.id))?;
            if self.cursor.segment <= oldest.id {
                let next = self.segments.front().expect("one left").id;
                self.cursor = Cursor {
                    segment: next,
                    offset: 0,
                };
                self.write_cursor()?;
            }
            tracing::warn!(
                dropped = unsent,
                cap_bytes = self.cap_bytes,
                "spool full: oldest batches dropped"
            );
        }
        Ok(())
    }

    /// The next record to send, if any. Damaged records are skipped (and counted).
    pub fn peek(&mut self) -> anyhow::Result<Option<Record>> {
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
                    self.dropped_records += lost;
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

    /// Marks everything before `next` as delivered.
    pub fn commit(&mut self, next: Cursor) -> anyhow::Result<()> {
        self.cursor = next;
        self.write_cursor()?;
        while let Some(front) = self.segments.front() {
            let done = front.id < next.segment
                || (front.id == next.segment
                    && next.offset >= front.bytes
                    && self.segments.len() > 1);
            if !done {
                break;
            }
            std::fs::remove_file(seg_path(&self.dir, front.id))?;
            self.segments.pop_front();
            if let Some(f) = self.segments.front()
                && self.cursor.segment < f.id
            {
                self.cursor = Cursor {
                    segment: f.id,
                    offset: 0,
                };
                self.write_cursor()?;
            }
        }
        Ok(())
    }

    fn read_cursor(&self) -> Option<Cursor> {
        let text = std::fs::read_to_string(self.dir.join("cursor")).ok()?;
        let mut parts = text.split_whitespace();
        Some(Cursor {
            segment: parts.next()?.parse().ok()?,
            offset: parts.next()?.parse().ok()?,
        })
    }

    fn write_cursor(&self) -> anyhow::Result<()> {
        let tmp = self.dir.join("cursor.tmp");
        std::fs::write(
            &tmp,
            format!("{} {}\n", self.cursor.segment, self.cursor.offset),
        )?;
        std::fs::rename(tmp, self.dir.join("cursor"))?;
        Ok(())
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

fn seg_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.seg"))
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
        let d = std::env::temp_dir().join(format!("gpulens-spool-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
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
        let mut s = Spool::open(&d, 1 << 20).unwrap();
        for seq in 1..=500 {
            s.append(seq, &vec![seq as u8; 300]).unwrap();
        }
        let r = s.peek().unwrap().unwrap();
        assert_eq!((r.seq, r.body.len()), (1, 300));
        s.commit(r.next).unwrap();
        assert!(s.segments.len() > 1, "rotated into several segments");
        // A restart resumes at the cursor: record 1 is not sent again.
        let mut s = Spool::open(&d, 1 << 20).unwrap();
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
        let mut s = Spool::open(&d, 64 * 1024).unwrap();
        for seq in 1..=200 {
            s.append(seq, &[7u8; 1000]).unwrap();
        }
        assert!(s.disk_bytes() <= 64 * 1024, "{}", s.disk_bytes());
        assert!(s.dropped_records > 0);
        let kept = drain(&mut s);
        assert_eq!(
            kept.len() as u64 + s.dropped_records,
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
        let mut s = Spool::open(&d, 1 << 20).unwrap();
        for seq in 1..=3 {
            s.append(seq, b"batch").unwrap();
        }
        drop(s);
        // A crash in the middle of writing record 4.
        let seg = seg_path(&d, 1);
        let mut f = OpenOptions::new().append(true).open(&seg).unwrap();
        f.write_all(&[99, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let mut s = Spool::open(&d, 1 << 20).unwrap();
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
        assert_eq!(s.dropped_records, 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
