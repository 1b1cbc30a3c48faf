//! The Parquet file of event rows: its schema, and the rows buffered column by column until a
//! row group is written.

use std::{io::Write, sync::Arc};

use bytes::Bytes;
use parquet::{
    basic::Compression,
    data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type},
    file::{
        properties::{EnabledStatistics, WriterProperties},
        writer::{SerializedFileWriter, SerializedRowGroupWriter},
    },
    schema::{
        parser::parse_message_type,
        types::{ColumnPath, Type},
    },
};

use crate::{EventRow, ParquetError};

/// The columns, in order (documented in the crate's doc and docs/).
const SCHEMA: &str = "message reel_event {
    REQUIRED BYTE_ARRAY session_id (STRING);
    REQUIRED INT64 ordinal;
    REQUIRED INT64 time (TIMESTAMP(MILLIS, true));
    REQUIRED BYTE_ARRAY event_type (STRING);
    OPTIONAL BYTE_ARRAY run_id (STRING);
    OPTIONAL BYTE_ARRAY message_id (STRING);
    OPTIONAL BYTE_ARRAY call_id (STRING);
    OPTIONAL BYTE_ARRAY role (STRING);
    OPTIONAL BYTE_ARRAY text (STRING);
    OPTIONAL BYTE_ARRAY tool_name (STRING);
    OPTIONAL BYTE_ARRAY tool_arguments (STRING);
    OPTIONAL BYTE_ARRAY tool_status (STRING);
    OPTIONAL BYTE_ARRAY model (STRING);
    OPTIONAL INT64 input_tokens;
    OPTIONAL INT64 output_tokens;
    OPTIONAL INT64 cache_tokens;
    OPTIONAL DOUBLE cost_usd;
    OPTIONAL BYTE_ARRAY status (STRING);
    OPTIONAL BYTE_ARRAY error_code (STRING);
}";

/// The columns of free text (no dictionary, no statistics).
const FREE_TEXT: [&str; 2] = ["text", "tool_arguments"];

/// Rows per row group: large enough for readers to skip by statistics, small enough that a
/// buffered group stays a few megabytes.
pub const ROWS_PER_GROUP: usize = 65_536;

/// A column of text, packed into one buffer until its row group is written (a value each
/// would be an allocation each), with the definition levels of an optional one.
struct TextColumn {
    data: Vec<u8>,
    /// Where each value ends in `data`.
    ends: Vec<usize>,
    levels: Option<Vec<i16>>,
}

impl TextColumn {
    fn required() -> Self {
        Self {
            data: Vec::new(),
            ends: Vec::new(),
            levels: None,
        }
    }

    fn optional() -> Self {
        Self {
            levels: Some(Vec::new()),
            ..Self::required()
        }
    }

    fn push(&mut self, value: Option<&str>) {
        if let Some(levels) = &mut self.levels {
            levels.push(i16::from(value.is_some()));
        }
        if let Some(value) = value {
            self.data.extend_from_slice(value.as_bytes());
            self.ends.push(self.data.len());
        }
    }

    /// The values, as slices of one shared buffer; the column is empty after, with room for
    /// as much again (a buffer grown anew for each row group is memory touched anew).
    fn take(&mut self) -> Vec<ByteArray> {
        let room = Vec::with_capacity(self.data.capacity());
        let data = Bytes::from(std::mem::replace(&mut self.data, room));
        let mut start = 0;
        let values = self
            .ends
            .iter()
            .map(|&end| {
                let value = ByteArray::from(data.slice(start..end));
                start = end;
                value
            })
            .collect();
        self.ends.clear();
        values
    }
}

/// A column of values, with the definition levels of an optional one (1: a value, 0: NULL).
struct Column<T> {
    values: Vec<T>,
    levels: Option<Vec<i16>>,
}

impl<T> Column<T> {
    fn required() -> Self {
        Self {
            values: Vec::new(),
            levels: None,
        }
    }

    fn optional() -> Self {
        Self {
            values: Vec::new(),
            levels: Some(Vec::new()),
        }
    }

    fn push(&mut self, value: Option<T>) {
        if let Some(levels) = &mut self.levels {
            levels.push(i16::from(value.is_some()));
        }
        self.values.extend(value);
    }

    fn clear(&mut self) {
        self.values.clear();
        if let Some(levels) = &mut self.levels {
            levels.clear();
        }
    }
}

/// The buffered rows, one vector per column.
struct Columns {
    texts: [TextColumn; 2],
    optional_texts: [TextColumn; 9],
    ordinal: Column<i64>,
    time: Column<i64>,
    tokens: [Column<i64>; 3],
    cost: Column<f64>,
    statuses: [TextColumn; 2],
    rows: usize,
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Columns {
    fn new() -> Self {
        Self {
            texts: std::array::from_fn(|_| TextColumn::required()),
            optional_texts: std::array::from_fn(|_| TextColumn::optional()),
            ordinal: Column::required(),
            time: Column::required(),
            tokens: std::array::from_fn(|_| Column::optional()),
            cost: Column::optional(),
            statuses: std::array::from_fn(|_| TextColumn::optional()),
            rows: 0,
        }
    }

    fn push(&mut self, row: EventRow) {
        let [session, event_type] = &mut self.texts;
        session.push(Some(&row.session_id));
        event_type.push(Some(row.event_type));
        self.ordinal.push(Some(count(row.ordinal)));
        self.time.push(Some(count(row.time_ms)));
        let optional = [
            row.run_id.as_deref(),
            row.message_id,
            row.call_id,
            row.role,
            row.text,
            row.tool_name,
            row.tool_arguments,
            row.tool_status,
            row.model.as_deref(),
        ];
        for (column, value) in self.optional_texts.iter_mut().zip(optional) {
            column.push(value);
        }
        let tokens = [row.input_tokens, row.output_tokens, row.cache_tokens];
        for (column, value) in self.tokens.iter_mut().zip(tokens) {
            column.push(value.map(count));
        }
        self.cost.push(row.cost_usd);
        let [status, error_code] = &mut self.statuses;
        status.push(row.status);
        error_code.push(row.error_code);
        self.rows += 1;
    }

    /// Writes the buffered rows as one row group, in the schema's column order.
    fn write<W: Write + Send>(
        &mut self,
        group: &mut SerializedRowGroupWriter<'_, W>,
    ) -> Result<(), ParquetError> {
        let [session, event_type] = &mut self.texts;
        text_column(group, session)?;
        int_column(group, &self.ordinal)?;
        int_column(group, &self.time)?;
        text_column(group, event_type)?;
        for column in &mut self.optional_texts {
            text_column(group, column)?;
        }
        for column in &self.tokens {
            int_column(group, column)?;
        }
        let mut writer = group.next_column()?.ok_or(ParquetError::Schema)?;
        let cost = &self.cost;
        writer
            .typed::<DoubleType>()
            .write_batch(&cost.values, cost.levels.as_deref(), None)?;
        writer.close()?;
        for column in &mut self.statuses {
            text_column(group, column)?;
        }
        self.ordinal.clear();
        self.time.clear();
        self.tokens.iter_mut().for_each(Column::clear);
        self.cost.clear();
        self.rows = 0;
        Ok(())
    }
}

/// Writes a text column's values, and empties it.
fn text_column<W: Write + Send>(
    group: &mut SerializedRowGroupWriter<'_, W>,
    column: &mut TextColumn,
) -> Result<(), ParquetError> {
    let mut writer = group.next_column()?.ok_or(ParquetError::Schema)?;
    let values = column.take();
    writer
        .typed::<ByteArrayType>()
        .write_batch(&values, column.levels.as_deref(), None)?;
    if let Some(levels) = &mut column.levels {
        levels.clear();
    }
    Ok(writer.close()?)
}

fn int_column<W: Write + Send>(
    group: &mut SerializedRowGroupWriter<'_, W>,
    column: &Column<i64>,
) -> Result<(), ParquetError> {
    let mut writer = group.next_column()?.ok_or(ParquetError::Schema)?;
    writer
        .typed::<Int64Type>()
        .write_batch(&column.values, column.levels.as_deref(), None)?;
    Ok(writer.close()?)
}

/// A Parquet file of event rows being written: rows go in, row groups go out.
pub struct EventFile<W: Write + Send> {
    writer: SerializedFileWriter<W>,
    columns: Columns,
    rows: u64,
}

impl<W: Write + Send> EventFile<W> {
    /// Starts the file on `out` (Snappy-compressed, every column with statistics).
    pub fn new(out: W) -> Result<Self, ParquetError> {
        let schema: Arc<Type> = Arc::new(parse_message_type(SCHEMA)?);
        let mut properties = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by(format!("reel {}", env!("CARGO_PKG_VERSION")));
        // What was said is nearly always new: a dictionary of it only costs hashing, and its
        // minimum and maximum help no query skip a page.
        for column in FREE_TEXT {
            let path = ColumnPath::from(column);
            properties = properties
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_statistics_enabled(path, EnabledStatistics::None);
        }
        let properties = properties.build();
        Ok(Self {
            writer: SerializedFileWriter::new(out, schema, Arc::new(properties))?,
            columns: Columns::new(),
            rows: 0,
        })
    }

    /// Adds a row (written out with its row group).
    pub fn push(&mut self, row: EventRow) -> Result<(), ParquetError> {
        self.columns.push(row);
        self.rows += 1;
        if self.columns.rows >= ROWS_PER_GROUP {
            self.flush()?;
        }
        Ok(())
    }

    /// Rows buffered and not yet written.
    pub fn buffered(&self) -> usize {
        self.columns.rows
    }

    /// Writes the buffered rows as a row group.
    pub fn flush(&mut self) -> Result<(), ParquetError> {
        if self.columns.rows == 0 {
            return Ok(());
        }
        let mut group = self.writer.next_row_group()?;
        self.columns.write(&mut group)?;
        group.close()?;
        Ok(())
    }

    /// Writes the rest and the footer: the output, flushed, and the rows written in all.
    pub fn finish(mut self) -> Result<(W, u64), ParquetError> {
        self.flush()?;
        let mut out = self.writer.into_inner()?;
        out.flush().map_err(ParquetError::Io)?;
        Ok((out, self.rows))
    }
}
