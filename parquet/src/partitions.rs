//! Event rows of many sessions into a directory partitioned by day, as Hive-style readers
//! (DuckDB, Spark, pandas with pyarrow) take it: `DIR/day=2026-11-27/part-0.parquet`, each
//! event in the file of the UTC day it was appended.
//!
//! Each day's file is written under a hidden name and renamed into place when complete, so a
//! failed export leaves no file that looks whole (and removes what it wrote). A day's rows are
//! buffered until a row group is full, and when all days together hold a row group's worth,
//! the largest is written out: memory stays bounded however many days an export spans.

use std::{
    collections::BTreeMap,
    fs::File,
    io::BufWriter,
    path::{Path, PathBuf},
};

use crate::{EventFile, EventRow, ParquetError, columns::ROWS_PER_GROUP};

/// The name of each day's file.
const PART: &str = "part-0.parquet";

/// A directory of day partitions being written.
pub struct DayPartitions {
    dir: PathBuf,
    days: BTreeMap<String, EventFile<BufWriter<File>>>,
}

impl DayPartitions {
    /// Starts writing into `dir`, which is created, or must be empty: an export never
    /// mixes with files it did not write.
    pub fn create(dir: &Path) -> Result<Self, ParquetError> {
        let io = |e| ParquetError::Path(dir.to_owned(), e);
        match std::fs::read_dir(dir) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(ParquetError::NotEmpty(dir.to_owned()));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir).map_err(io)?;
            }
            Err(e) => return Err(io(e)),
        }
        Ok(Self {
            dir: dir.to_owned(),
            days: BTreeMap::new(),
        })
    }

    /// Adds a row to its day's file.
    pub fn push(&mut self, row: EventRow) -> Result<(), ParquetError> {
        let day = utc_day(row.time_ms);
        if !self.days.contains_key(&day) {
            let folder = self.dir.join(format!("day={day}"));
            std::fs::create_dir_all(&folder).map_err(|e| ParquetError::Path(folder.clone(), e))?;
            let path = in_progress(&folder);
            let file = File::create(&path).map_err(|e| ParquetError::Path(path, e))?;
            self.days
                .insert(day.clone(), EventFile::new(BufWriter::new(file))?);
        }
        self.days.get_mut(&day).expect("inserted above").push(row)?;
        let buffered: usize = self.days.values().map(EventFile::buffered).sum();
        if buffered >= ROWS_PER_GROUP {
            let largest = self.days.values_mut().max_by_key(|file| file.buffered());
            largest.map_or(Ok(()), EventFile::flush)?;
        }
        Ok(())
    }

    /// Finishes every day's file and renames it into place: the days written and the rows.
    pub fn finish(self) -> Result<(usize, u64), ParquetError> {
        let days = self.days.len();
        let mut rows = 0;
        for (day, file) in self.days {
            let (out, written) = file.finish()?;
            out.into_inner()
                .map_err(|e| ParquetError::Io(e.into_error()))?
                .sync_all()
                .map_err(ParquetError::Io)?;
            let folder = self.dir.join(format!("day={day}"));
            let done = folder.join(PART);
            std::fs::rename(in_progress(&folder), &done)
                .map_err(|e| ParquetError::Path(done, e))?;
            rows += written;
        }
        Ok((days, rows))
    }

    /// Removes what this export wrote (after a failure): its files and the folders it made.
    pub fn abandon(self) {
        for day in self.days.keys() {
            let folder = self.dir.join(format!("day={day}"));
            let _ = std::fs::remove_file(in_progress(&folder));
            let _ = std::fs::remove_dir(&folder);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn in_progress(folder: &Path) -> PathBuf {
    folder.join(format!(".{PART}.partial"))
}

/// The UTC date of a time in milliseconds since the epoch, as `YYYY-MM-DD` (the civil-from-days
/// algorithm of Howard Hinnant's date library).
pub fn utc_day(ms: u64) -> String {
    let days = i64::try_from(ms / 86_400_000).unwrap_or(i64::MAX / 2) + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_utc_dates() {
        assert_eq!(utc_day(0), "1970-01-01");
        assert_eq!(utc_day(86_399_999), "1970-01-01");
        assert_eq!(utc_day(951_782_400_000), "2000-02-29");
        // 2026-11-27T23:59:59.999Z, then midnight.
        assert_eq!(utc_day(1_795_823_999_999), "2026-11-27");
        assert_eq!(utc_day(1_795_824_000_000), "2026-11-28");
    }
}
