//! A session's stream read from its store a chunk at a time: the frames of the committed
//! events after an offset, as one JSON array, every frame of an event in the same chunk.
//!
//! Only what the store holds is read: a reader never sees an event a crash could take back,
//! and the same range always reads as the same bytes (what lets a cache keep a chunk).

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};
use reel_engine::{Output, OutputKind, SessionCatalog, StoreError, StoredStream};

use crate::frames::frames_of;

/// The frames a response carries at most, in bytes of JSON (one event's frames go together,
/// so a chunk of one huge event is larger).
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// What one read gave.
pub struct Chunk {
    /// The frames, as a JSON array.
    pub body: Bytes,
    pub frames: usize,
    /// The ordinal of the last event read before it, and of the last event in it.
    pub after: u64,
    pub through: u64,
    /// Whether it holds everything the store had when it was read.
    pub up_to_date: bool,
}

impl Chunk {
    /// No events: a reader at the tail, after event `at`.
    pub fn empty(at: u64) -> Self {
        Self {
            body: Bytes::from_static(b"[]"),
            frames: 0,
            after: at,
            through: at,
            up_to_date: true,
        }
    }

    /// Whether it moved the reader on (an event with no frames moves it too).
    pub fn advanced(&self) -> bool {
        self.through > self.after
    }
}

/// One reader's place in a session's stream. It keeps the stored stream it opened, so that
/// reading on costs the events read, not a fold of the session up to the reader again.
pub struct ChunkReader {
    id: String,
    /// The ordinal of the last event read.
    at: u64,
    /// Boxed: a reader waiting at the tail holds only a pointer.
    stored: Option<Box<StoredStream>>,
    /// Events read from the store and not yet put in a chunk.
    pending: VecDeque<Output>,
}

impl ChunkReader {
    /// A reader of session `id` after event `at`.
    pub fn new(id: &str, at: u64) -> Self {
        Self {
            id: id.to_owned(),
            at,
            stored: None,
            pending: VecDeque::new(),
        }
    }

    /// The ordinal of the last event read.
    pub fn at(&self) -> u64 {
        self.at
    }

    /// The next chunk: the frames of the stored events after the last one read, up to
    /// [`CHUNK_BYTES`] of them (empty when nothing new is stored).
    pub async fn read(&mut self, catalog: &mut dyn SessionCatalog) -> Result<Chunk, StoreError> {
        let after = self.at;
        let mut body = BytesMut::with_capacity(256);
        body.put_u8(b'[');
        let mut frames = 0;
        let full = loop {
            if body.len() >= CHUNK_BYTES {
                break true;
            }
            let Some(output) = self.next_event(catalog).await? else {
                break false;
            };
            for frame in frames_of(&output) {
                if frame.is_marker() {
                    continue;
                }
                if frames > 0 {
                    body.put_u8(b',');
                }
                body.extend_from_slice(frame.json.as_bytes());
                frames += 1;
            }
            if let OutputKind::Event(committed) = &output.kind {
                self.at = committed.entry.ordinal;
            }
        };
        // A full chunk that happens to end at the tail still says so (the reader need not ask
        // once more to learn it).
        let up_to_date = !full || self.peek(catalog).await?;
        body.put_u8(b']');
        Ok(Chunk {
            body: body.freeze(),
            frames,
            after,
            through: self.at,
            up_to_date,
        })
    }

    /// The next stored event, or `None` when the store holds no more yet.
    async fn next_event(
        &mut self,
        catalog: &mut dyn SessionCatalog,
    ) -> Result<Option<Output>, StoreError> {
        if self.pending.is_empty() {
            self.fill(catalog).await?;
        }
        Ok(self.pending.pop_front())
    }

    /// Whether the store holds nothing after what was read.
    async fn peek(&mut self, catalog: &mut dyn SessionCatalog) -> Result<bool, StoreError> {
        if self.pending.is_empty() {
            self.fill(catalog).await?;
        }
        Ok(self.pending.is_empty())
    }

    /// Reads the next page of stored events into `pending`.
    async fn fill(&mut self, catalog: &mut dyn SessionCatalog) -> Result<(), StoreError> {
        let stored = match &mut self.stored {
            Some(stored) => stored,
            None => self.stored.insert(Box::new(
                StoredStream::open(catalog, &self.id, self.at, None).await?,
            )),
        };
        self.pending.extend(stored.next_page(catalog).await?);
        Ok(())
    }
}
