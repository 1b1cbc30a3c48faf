//! A stored session's log read page by page, so that a reader of a million-event session holds
//! one page at a time, never the log.

use crate::{
    catalog::SessionCatalog,
    log::{LogEntry, ordinal_error},
    store::StoreError,
};

/// Events read per query: large enough that paging costs little, small enough to stay flat.
pub const PAGE: u32 = 4096;

/// The events of one session after an ordinal, up to another or (following) up to whatever is
/// stored when asked.
#[derive(Clone, Debug)]
pub struct LogPages {
    session_id: String,
    after: u64,
    up_to: Option<u64>,
    page: u32,
}

impl LogPages {
    /// The events after `after` up to `up_to`, which must all be there.
    pub fn new(session_id: &str, after: u64, up_to: u64) -> Self {
        Self {
            session_id: session_id.to_owned(),
            after,
            up_to: Some(up_to),
            page: PAGE,
        }
    }

    /// The events after `after`, as far as they are stored at each call: for following a
    /// session another process writes.
    pub fn following(session_id: &str, after: u64) -> Self {
        Self {
            session_id: session_id.to_owned(),
            after,
            up_to: None,
            page: PAGE,
        }
    }

    /// Reads `page` events per query instead of [`PAGE`].
    pub fn page_size(mut self, page: u32) -> Self {
        self.page = page.max(1);
        self
    }

    /// The ordinal of the last event handed out.
    pub fn after(&self) -> u64 {
        self.after
    }

    /// How many events remain up to the end (0 when following).
    pub fn remaining(&self) -> u64 {
        self.up_to
            .map_or(0, |up_to| up_to.saturating_sub(self.after))
    }

    /// The next page: empty at the end (or, when following, when nothing newer is stored). A
    /// gap in the stored ordinals, or a log that ends before the end asked for, is
    /// [`StoreError::Damaged`]: a view of a damaged log would be wrong without saying so.
    pub async fn next<C: SessionCatalog + ?Sized>(
        &mut self,
        catalog: &mut C,
    ) -> Result<Vec<LogEntry>, StoreError> {
        if self.up_to.is_some_and(|up_to| self.after >= up_to) {
            return Ok(Vec::new());
        }
        let mut page = catalog
            .events_page(&self.session_id, self.after, self.page)
            .await?;
        if let Some(up_to) = self.up_to {
            page.retain(|entry| entry.ordinal <= up_to);
        }
        for entry in &page {
            if entry.ordinal != self.after + 1 {
                return Err(self.damaged(&ordinal_error(entry.ordinal, self.after + 1)));
            }
            self.after = entry.ordinal;
        }
        if let Some(up_to) = self.up_to.filter(|_| page.is_empty()) {
            let ends = format!("the log ends at ordinal {}, before {up_to}", self.after);
            return Err(self.damaged(&ends));
        }
        Ok(page)
    }

    fn damaged(&self, what: &str) -> StoreError {
        StoreError::Damaged(format!("session {:?}: {what}", self.session_id))
    }
}
