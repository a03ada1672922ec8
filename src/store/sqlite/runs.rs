//! A batch's valid events in key order (file order within a key) in bounded
//! memory: encoded as they are staged, sorted in runs of at most `RUN_BYTES`, runs
//! spilled to an unlinked temporary file next to the database, then merged k ways.
//! No SQLite: the writer numbers flights before it stages and folds what the merge
//! hands it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;

/// The memory of the run being built (its encoded events and their sort entries):
/// a run this large is sorted and spilled. A few tens of MiB keep a 5M-event
/// ingest within the daemon's memory budget with SQLite's page cache beside it.
pub(super) const RUN_BYTES: usize = 32 << 20;

/// The read buffers of every spilled run together during the merge, so that the
/// merge's memory does not grow with the number of runs.
const MERGE_BUFFERS_BYTES: usize = 8 << 20;
/// The bounds of one spilled run's read buffer.
const MERGE_BUFFER_MIN_BYTES: usize = 16 << 10;
const MERGE_BUFFER_MAX_BYTES: usize = 1 << 20;
/// The buffer runs are written through.
const SPILL_BUFFER_BYTES: usize = 1 << 20;
/// A block of merged events handed from the merge thread to the writer: at most
/// this many events, or this many bytes of their texts (one larger event goes
/// alone).
const BLOCK_EVENTS: usize = 4096;
const BLOCK_TEXT_BYTES: usize = 1 << 20;
/// Blocks merged ahead of the writer, at most.
const BLOCKS_IN_FLIGHT: usize = 2;

/// The texts of an encoded event: flight id, event kind, instant, payload, raw
/// text and slot (empty when it has none).
const TEXTS: usize = 6;
/// The fixed part of an encoded event: record index, flight number, revision (or
/// `NO_REVISION`), one byte of flags (`RETRACTED`, `HAS_SLOT`), and the byte
/// lengths of its `TEXTS`.
const HEAD_BYTES: usize = 8 + 8 + 8 + 1 + 4 * TEXTS;
/// Where the text lengths start in an encoded event.
const LENGTHS_AT: usize = 8 + 8 + 8 + 1;
/// The encoded revision of an event without one of its own (revisions are ≥ 0).
const NO_REVISION: i64 = -1;
/// The flags of an encoded event.
const RETRACTED: u8 = 1;
const HAS_SLOT: u8 = 2;

/// One staged event as the merge hands it over, borrowed from the merge's buffers
/// until its next row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Staged<'a> {
    pub(crate) key: &'a [u8; 32],
    /// The event's 0-based position in the file.
    pub(crate) index: u64,
    /// `spoolite_flight.ref` of its flight (0 in a dry run, which numbers none).
    pub(crate) flight_ref: i64,
    pub(crate) flight_id: &'a str,
    /// `None`: the file's revision applies.
    pub(crate) revision: Option<i64>,
    /// `"retracted": true`.
    pub(crate) retracted: bool,
    pub(crate) event_kind: &'a str,
    pub(crate) instant_utc: &'a str,
    pub(crate) payload: &'a str,
    /// The event as received, for quarantine.
    pub(crate) raw: &'a str,
    /// Its slot, if it has one.
    pub(crate) slot: Option<&'a str>,
}

impl<'a> Staged<'a> {
    /// Its texts, in the order a run encodes them.
    fn texts(&self) -> [&'a str; TEXTS] {
        [
            self.flight_id,
            self.event_kind,
            self.instant_utc,
            self.payload,
            self.raw,
            self.slot.unwrap_or(""),
        ]
    }

    fn flags(&self) -> u8 {
        u8::from(self.retracted) * RETRACTED + u8::from(self.slot.is_some()) * HAS_SLOT
    }
}

/// The sort entry of an encoded event in the run being built.
struct Entry {
    key: [u8; 32],
    /// Where the event starts in the arena; later events have larger offsets, so
    /// the offset orders a run's versions of one key in file order.
    offset: u32,
}

/// The run being built: encoded events in file order and their sort entries.
#[derive(Default)]
struct Run {
    arena: Vec<u8>,
    entries: Vec<Entry>,
}

impl Run {
    fn bytes(&self) -> usize {
        self.arena.len() + self.entries.len() * std::mem::size_of::<Entry>()
    }

    fn push(&mut self, event: &Staged<'_>) {
        let offset = u32::try_from(self.arena.len()).expect("a run stays far below 4 GiB");
        encode(event, &mut self.arena);
        self.entries.push(Entry {
            key: *event.key,
            offset,
        });
    }

    /// Key order, then file order (the offset) within a key; unstable is enough
    /// since no two entries have the same offset.
    fn sort(&mut self) {
        self.entries
            .sort_unstable_by(|a, b| a.key.cmp(&b.key).then(a.offset.cmp(&b.offset)));
    }

    /// The encoded event of entry `at`.
    fn encoded(&self, at: usize) -> &[u8] {
        let start = self.entries[at].offset as usize;
        let rest = &self.arena[start..];
        &rest[..encoded_len(rest)]
    }

    fn clear(&mut self) {
        self.arena.clear();
        self.entries.clear();
    }
}

/// Appends the encoding of `event` (without its key) to `out`.
fn encode(event: &Staged<'_>, out: &mut Vec<u8>) {
    let texts = event.texts();
    out.extend_from_slice(&event.index.to_le_bytes());
    out.extend_from_slice(&event.flight_ref.to_le_bytes());
    out.extend_from_slice(&event.revision.unwrap_or(NO_REVISION).to_le_bytes());
    out.push(event.flags());
    for text in texts {
        let len = u32::try_from(text.len()).expect("an event's text is bounded far below 4 GiB");
        out.extend_from_slice(&len.to_le_bytes());
    }
    for text in texts {
        out.extend_from_slice(text.as_bytes());
    }
}

/// The length of the encoded event at the start of `bytes` (at least `HEAD_BYTES`).
fn encoded_len(bytes: &[u8]) -> usize {
    HEAD_BYTES + (0..TEXTS).map(|i| text_len(bytes, i)).sum::<usize>()
}

/// The byte length of text `i` of an encoded event.
fn text_len(bytes: &[u8], i: usize) -> usize {
    let at = LENGTHS_AT + 4 * i;
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize
}

fn le_i64(bytes: &[u8], at: usize) -> i64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    i64::from_le_bytes(word)
}

/// Reads back an encoded event. The texts were `&str`s when encoded, so a failure
/// means the run file was damaged under us.
fn decode<'a>(key: &'a [u8; 32], bytes: &'a [u8]) -> io::Result<Staged<'a>> {
    let mut at = HEAD_BYTES;
    let mut texts = [""; TEXTS];
    for (i, text) in texts.iter_mut().enumerate() {
        let len = text_len(bytes, i);
        *text = std::str::from_utf8(&bytes[at..at + len])
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a run file is damaged"))?;
        at += len;
    }
    let revision = le_i64(bytes, 16);
    Ok(Staged {
        key,
        index: le_i64(bytes, 0) as u64,
        flight_ref: le_i64(bytes, 8),
        revision: (revision != NO_REVISION).then_some(revision),
        retracted: bytes[24] & RETRACTED != 0,
        flight_id: texts[0],
        event_kind: texts[1],
        instant_utc: texts[2],
        payload: texts[3],
        raw: texts[4],
        slot: (bytes[24] & HAS_SLOT != 0).then_some(texts[5]),
    })
}

/// A batch's events being sorted: the run being built, and the runs already
/// spilled to a file.
pub(super) struct Runs {
    run: Run,
    /// The size of a run (`RUN_BYTES` but in tests).
    run_bytes: usize,
    /// Where a run file may be made, in order of preference.
    spill_dirs: Vec<PathBuf>,
    spill: Option<File>,
    /// The byte ranges of the spilled runs in `spill`, in file order.
    spilled: Vec<(u64, u64)>,
    spill_end: u64,
}

impl Runs {
    pub(super) fn new(spill_dirs: Vec<PathBuf>, run_bytes: usize) -> Runs {
        Runs {
            run: Run::default(),
            run_bytes,
            spill_dirs,
            spill: None,
            spilled: Vec::new(),
            spill_end: 0,
        }
    }

    /// Adds the next event in file order; spills the run first when it is full.
    pub(super) fn push(&mut self, event: &Staged<'_>) -> io::Result<()> {
        if !self.run.entries.is_empty() && self.run.bytes() >= self.run_bytes {
            self.spill_run()?;
        }
        self.run.push(event);
        Ok(())
    }

    /// Sorts the run being built and appends it to the run file.
    fn spill_run(&mut self) -> io::Result<()> {
        self.run.sort();
        if self.spill.is_none() {
            self.spill = Some(temporary_file(&self.spill_dirs)?);
        }
        let Some(file) = &self.spill else {
            unreachable!("made above")
        };
        let start = self.spill_end;
        let mut out = io::BufWriter::with_capacity(SPILL_BUFFER_BYTES, file);
        for (at, entry) in self.run.entries.iter().enumerate() {
            let encoded = self.run.encoded(at);
            out.write_all(&entry.key)?;
            out.write_all(encoded)?;
            self.spill_end += (entry.key.len() + encoded.len()) as u64;
        }
        out.flush()?;
        self.spilled.push((start, self.spill_end));
        self.run.clear();
        Ok(())
    }

    /// Hands `each` every event pushed, in key order and file order within a key.
    /// The runs are merged on a thread of their own, a few blocks ahead, so the
    /// caller's thread spends its time in SQLite; an error of `each` ends the
    /// merge. A run file that cannot be read back is `spill_error`.
    pub(super) fn for_each<E: Send>(
        self,
        spill_error: fn(io::Error) -> E,
        mut each: impl FnMut(&Staged<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let (full, merged) = crossbeam_channel::bounded::<io::Result<Block>>(BLOCKS_IN_FLIGHT);
        let (spare, recycled) = crossbeam_channel::bounded::<Block>(BLOCKS_IN_FLIGHT + 1);
        std::thread::scope(|scope| {
            let merging = std::thread::Builder::new()
                .name("spoolite-merge".into())
                .spawn_scoped(scope, move || merge_blocks(self, &full, &recycled));
            if let Err(error) = merging {
                return Err(spill_error(error));
            }
            // Owned here, so that an early return drops it and the merge thread,
            // blocked on a full channel, ends instead of being waited for forever.
            let merged = merged;
            for block in merged.iter() {
                let block = block.map_err(spill_error)?;
                for at in 0..block.rows.len() {
                    each(&block.get(at))?;
                }
                let _ = spare.try_send(block);
            }
            Ok(())
        })
    }

    /// Hands `each` every event pushed so far, in no particular order, and keeps
    /// them: the spilled runs read back one after the other, then the run being
    /// built. A run file that cannot be read back is `spill_error`.
    pub(super) fn each_staged<E>(
        &self,
        spill_error: fn(io::Error) -> E,
        mut each: impl FnMut(&Staged<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if let Some(file) = &self.spill {
            for &(start, end) in &self.spilled {
                let mut reader = RunReader::new(start, end, MERGE_BUFFER_MAX_BYTES);
                while reader.read_next(file).map_err(spill_error)? {
                    each(&decode(&reader.key, &reader.event).map_err(spill_error)?)?;
                }
            }
        }
        for (at, entry) in self.run.entries.iter().enumerate() {
            each(&decode(&entry.key, self.run.encoded(at)).map_err(spill_error)?)?;
        }
        Ok(())
    }

    /// Every event pushed, in key order and file order within a key.
    fn merge(mut self) -> io::Result<Merge> {
        self.run.sort();
        let buffer_bytes = (MERGE_BUFFERS_BYTES / self.spilled.len().max(1))
            .clamp(MERGE_BUFFER_MIN_BYTES, MERGE_BUFFER_MAX_BYTES);
        let spilled = self
            .spilled
            .iter()
            .map(|&(start, end)| RunReader::new(start, end, buffer_bytes))
            .collect();
        let mut merge = Merge {
            file: self.spill,
            spilled,
            memory: self.run,
            memory_at: 0,
            heap: BinaryHeap::new(),
            pending: None,
        };
        for source in 0..=merge.spilled.len() {
            merge.refill(source)?;
        }
        Ok(merge)
    }
}

/// The k-way merge of the spilled runs and the last run (still in memory): hands
/// out events in key order, and within a key in run order (file order), since the
/// runs were cut in file order.
struct Merge {
    file: Option<File>,
    spilled: Vec<RunReader>,
    /// The last run, source number `spilled.len()`.
    memory: Run,
    /// The memory run's entry that is its current event.
    memory_at: usize,
    /// The current key of each source that has events left, with its source
    /// number, which breaks ties in file order.
    heap: BinaryHeap<Reverse<([u8; 32], usize)>>,
    /// The source whose current event was handed out last: it moves on at the
    /// next call, once the caller is done with the event.
    pending: Option<usize>,
}

impl Merge {
    /// Adds merged events to `block` until it is full; false once every run is
    /// done.
    fn fill(&mut self, block: &mut Block) -> io::Result<bool> {
        while !block.is_full() {
            match self.next()? {
                Some(event) => block.push(&event),
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// The next event, or `None` when every run is done.
    fn next(&mut self) -> io::Result<Option<Staged<'_>>> {
        if let Some(source) = self.pending.take() {
            self.advance(source)?;
        }
        let Some(Reverse((_, source))) = self.heap.pop() else {
            return Ok(None);
        };
        self.pending = Some(source);
        self.current(source).map(Some)
    }

    /// Moves `source` to its next event and puts it back on the heap if it has one.
    fn advance(&mut self, source: usize) -> io::Result<()> {
        if source == self.spilled.len() {
            self.memory_at += 1;
        }
        self.refill(source)
    }

    /// Reads the current event of `source` (a spilled run's next one) and puts its
    /// key on the heap, unless the run is done.
    fn refill(&mut self, source: usize) -> io::Result<()> {
        let key = match self.spilled.get_mut(source) {
            Some(reader) => {
                let file = self.file.as_ref();
                match file {
                    Some(file) if reader.read_next(file)? => Some(reader.key),
                    _ => None,
                }
            }
            None => self
                .memory
                .entries
                .get(self.memory_at)
                .map(|entry| entry.key),
        };
        if let Some(key) = key {
            self.heap.push(Reverse((key, source)));
        }
        Ok(())
    }

    fn current(&self, source: usize) -> io::Result<Staged<'_>> {
        match self.spilled.get(source) {
            Some(reader) => decode(&reader.key, &reader.event),
            None => decode(
                &self.memory.entries[self.memory_at].key,
                self.memory.encoded(self.memory_at),
            ),
        }
    }
}

/// The merge thread: fills blocks (reusing those the writer is done with) and
/// sends them, until the runs are done, a read fails or the writer has gone.
fn merge_blocks(
    runs: Runs,
    full: &crossbeam_channel::Sender<io::Result<Block>>,
    recycled: &crossbeam_channel::Receiver<Block>,
) {
    let mut merge = match runs.merge() {
        Ok(merge) => merge,
        Err(error) => {
            let _ = full.send(Err(error));
            return;
        }
    };
    loop {
        let mut block = recycled.try_recv().unwrap_or_default();
        block.clear();
        let filled = merge.fill(&mut block);
        let done = !matches!(filled, Ok(true));
        let sent = match filled {
            Ok(false) if block.rows.is_empty() => return,
            Ok(_) => full.send(Ok(block)),
            Err(error) => full.send(Err(error)),
        };
        if done || sent.is_err() {
            return;
        }
    }
}

/// Merged events in a row, their texts in one string (checked UTF-8 once, when
/// they are read back), so a block goes from thread to thread whole.
#[derive(Default)]
struct Block {
    text: String,
    rows: Vec<BlockRow>,
}

/// An event of a block: its fixed fields, and where its texts end in the block's
/// `text` (each begins where the one before it ends).
struct BlockRow {
    key: [u8; 32],
    index: u64,
    flight_ref: i64,
    revision: Option<i64>,
    retracted: bool,
    has_slot: bool,
    ends: [usize; TEXTS],
}

impl Block {
    fn clear(&mut self) {
        self.text.clear();
        self.rows.clear();
    }

    fn is_full(&self) -> bool {
        self.rows.len() >= BLOCK_EVENTS || self.text.len() >= BLOCK_TEXT_BYTES
    }

    fn push(&mut self, event: &Staged<'_>) {
        let mut ends = [0; TEXTS];
        for (end, text) in ends.iter_mut().zip(event.texts()) {
            self.text.push_str(text);
            *end = self.text.len();
        }
        self.rows.push(BlockRow {
            key: *event.key,
            index: event.index,
            flight_ref: event.flight_ref,
            revision: event.revision,
            retracted: event.retracted,
            has_slot: event.slot.is_some(),
            ends,
        });
    }

    fn get(&self, at: usize) -> Staged<'_> {
        let row = &self.rows[at];
        let begin = match at {
            0 => 0,
            _ => self.rows[at - 1].ends[TEXTS - 1],
        };
        let [flight, kind, instant, payload, raw, slot] = row.ends;
        Staged {
            key: &row.key,
            index: row.index,
            flight_ref: row.flight_ref,
            flight_id: &self.text[begin..flight],
            revision: row.revision,
            retracted: row.retracted,
            event_kind: &self.text[flight..kind],
            instant_utc: &self.text[kind..instant],
            payload: &self.text[instant..payload],
            raw: &self.text[payload..raw],
            slot: row.has_slot.then(|| &self.text[raw..slot]),
        }
    }
}

/// One spilled run read back through a buffer of its own, by position (`pread`),
/// so that every run shares the file's one descriptor.
struct RunReader {
    /// The file offset of the next byte to buffer, and the run's end.
    next: u64,
    end: u64,
    buffer: Vec<u8>,
    /// The unread part of `buffer`.
    at: usize,
    filled: usize,
    /// The current event: its key and encoding.
    key: [u8; 32],
    event: Vec<u8>,
}

impl RunReader {
    fn new(start: u64, end: u64, buffer_bytes: usize) -> RunReader {
        RunReader {
            next: start,
            end,
            buffer: vec![0; buffer_bytes],
            at: 0,
            filled: 0,
            key: [0; 32],
            event: Vec::new(),
        }
    }

    /// Reads the run's next event into `key` and `event`; false at the run's end.
    fn read_next(&mut self, file: &File) -> io::Result<bool> {
        if self.at == self.filled && self.next == self.end {
            return Ok(false);
        }
        let mut key = [0u8; 32];
        self.read_exact(file, &mut key)?;
        self.key = key;
        let mut head = [0u8; HEAD_BYTES];
        self.read_exact(file, &mut head)?;
        // Taken out of `self` while `self` reads into it; the buffer is reused.
        let mut event = std::mem::take(&mut self.event);
        event.clear();
        event.extend_from_slice(&head);
        event.resize(encoded_len(&head), 0);
        let read = self.read_exact(file, &mut event[HEAD_BYTES..]);
        self.event = event;
        read.map(|()| true)
    }

    /// Fills `out` from the buffer, refilling it from the file as needed.
    fn read_exact(&mut self, file: &File, mut out: &mut [u8]) -> io::Result<()> {
        while !out.is_empty() {
            if self.at == self.filled {
                self.fill(file)?;
            }
            let n = out.len().min(self.filled - self.at);
            out[..n].copy_from_slice(&self.buffer[self.at..self.at + n]);
            self.at += n;
            out = &mut out[n..];
        }
        Ok(())
    }

    fn fill(&mut self, file: &File) -> io::Result<()> {
        let left = usize::try_from(self.end - self.next).unwrap_or(usize::MAX);
        let want = left.min(self.buffer.len());
        if want == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "a run file ended early",
            ));
        }
        file.read_exact_at(&mut self.buffer[..want], self.next)?;
        self.next += want as u64;
        self.at = 0;
        self.filled = want;
        Ok(())
    }
}

/// A file for runs in the first of `dirs` that takes one, which no crash can leave
/// behind: unnamed (`O_TMPFILE`), or, where the filesystem has no unnamed files,
/// named and removed at once.
fn temporary_file(dirs: &[PathBuf]) -> io::Result<File> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no folder for run files");
    for dir in dirs {
        match unnamed_file(dir).or_else(|_| named_then_removed(dir)) {
            Ok(file) => return Ok(file),
            Err(error) => {
                last = io::Error::new(
                    error.kind(),
                    format!("create a run file in {}: {error}", dir.display()),
                )
            }
        }
    }
    Err(last)
}

fn unnamed_file(dir: &std::path::Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir)
}

/// A hidden name of this process's own, unlinked as soon as it is open; only a
/// kill in between leaves it, and its name says what it is.
fn named_then_removed(dir: &std::path::Path) -> io::Result<File> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    let path = dir.join(format!(".spoolite-run-{}-{nanos}.tmp", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(key: u8, index: u64, payload: &str) -> (Vec<u8>, u64, String) {
        (vec![key; 32], index, payload.to_owned())
    }

    /// Pushes `events` (key byte, index, payload) through runs of `run_bytes` and
    /// returns what the merge hands back, as (key byte, index, payload).
    fn sorted(events: &[(Vec<u8>, u64, String)], spill: bool) -> Vec<(u8, u64, String)> {
        let mut runs = Runs::new(vec![std::env::temp_dir()], RUN_BYTES);
        for (key, index, payload) in events {
            let key: [u8; 32] = key.as_slice().try_into().expect("32 bytes");
            runs.push(&Staged {
                key: &key,
                index: *index,
                flight_ref: 7,
                flight_id: "BA0117-20261129",
                revision: (index % 2 == 0).then_some(*index as i64),
                retracted: index % 3 == 0,
                event_kind: "landing",
                instant_utc: "2026-11-29T10:05:00Z",
                payload,
                raw: "{raw}",
                slot: (index % 5 == 0).then_some("2"),
            })
            .expect("push");
            if spill {
                runs.spill_run().expect("spill");
            }
        }
        let mut out = Vec::new();
        let merged = runs.for_each(
            |error| error,
            |staged| {
                assert_eq!(staged.flight_ref, 7);
                assert_eq!(staged.flight_id, "BA0117-20261129");
                assert_eq!(
                    staged.revision,
                    (staged.index % 2 == 0).then_some(staged.index as i64)
                );
                assert_eq!(staged.retracted, staged.index % 3 == 0);
                assert_eq!(staged.slot, (staged.index % 5 == 0).then_some("2"));
                assert_eq!(
                    (staged.event_kind, staged.instant_utc, staged.raw),
                    ("landing", "2026-11-29T10:05:00Z", "{raw}")
                );
                out.push((staged.key[0], staged.index, staged.payload.to_owned()));
                Ok(())
            },
        );
        merged.expect("merge");
        out
    }

    #[test]
    fn key_order_then_file_order_in_memory_and_spilled() {
        let events = [
            event(3, 0, "{\"a\":1}"),
            event(1, 1, "{}"),
            event(3, 2, "{\"a\":2}"),
            event(2, 3, ""),
            event(1, 4, "{\"b\":[1,2]}"),
        ];
        let expected = vec![
            (1, 1, "{}".to_owned()),
            (1, 4, "{\"b\":[1,2]}".to_owned()),
            (2, 3, String::new()),
            (3, 0, "{\"a\":1}".to_owned()),
            (3, 2, "{\"a\":2}".to_owned()),
        ];
        assert_eq!(sorted(&events, false), expected);
        assert_eq!(sorted(&events, true), expected);
    }

    #[test]
    fn nothing_staged_merges_to_nothing() {
        assert_eq!(sorted(&[], false), Vec::new());
    }

    #[test]
    fn an_event_larger_than_a_read_buffer_comes_back_whole() {
        let big = "x".repeat(3 * MERGE_BUFFER_MAX_BYTES + 17);
        let events = [event(2, 0, &big), event(1, 1, "{}"), event(2, 2, "{}")];
        let out = sorted(&events, true);
        assert_eq!(out.len(), 3);
        assert_eq!(out[1].2, big);
    }
}
