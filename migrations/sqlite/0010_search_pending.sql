-- The documents written since FTS5 last took any, and FTS5 fed in batches. FTS5 costs a fixed
-- amount in every transaction that gives it anything (it writes a new segment and its
-- structure record at commit), about as much as a short turn's own writes, so a conversation
-- paid it on every turn. Now a new document waits here, written in the same transaction as its
-- entity, until 256 of them (or 256 KiB of text) wait; then all of them go into `search_fts` at
-- once (a larger batch also means less merging). A search reads both: FTS5 for the indexed
-- documents, and the waiting ones matched by the same query in an in-memory FTS5 table of its
-- own (`storage/src/search.rs`, about a millisecond at the bound), so a hit is never behind the
-- stored entities. PostgreSQL's GIN index does the same by itself (its pending list). Last,
-- the entities' triggers compare their kinds without building a temporary table (below).
CREATE TABLE search_pending (
    doc     INTEGER PRIMARY KEY,
    -- The bytes of the waiting bodies up to this one, as they were written (a running sum, so
    -- that the 256 KiB bound costs one lookup of the newest row instead of a sum of them all;
    -- a waiting document removed or rewritten leaves it a little off, which only moves the
    -- next batch a little).
    through INTEGER NOT NULL
);

DROP TRIGGER search_docs_inserted;
DROP TRIGGER search_docs_deleted;
DROP TRIGGER search_docs_updated;

-- A new document's number is above every other's (`INTEGER PRIMARY KEY` takes the largest plus
-- one), so the newest waiting row holds the running sum.
CREATE TRIGGER search_docs_inserted AFTER INSERT ON search_docs BEGIN
    INSERT INTO search_pending (doc, through) VALUES (
        new.doc,
        length(CAST(new.body AS BLOB))
            + coalesce((SELECT through FROM search_pending ORDER BY doc DESC LIMIT 1), 0)
    );
END;

-- Everything waiting goes into FTS5 with the current bodies, in the transaction that filled
-- the batch (`CROSS JOIN`: the few waiting rows outside, whatever the planner guesses).
CREATE TRIGGER search_pending_full AFTER INSERT ON search_pending
WHEN new.through >= 262144 OR (SELECT count(*) FROM search_pending) >= 256 BEGIN
    INSERT INTO search_fts (rowid, body)
    SELECT d.doc, d.body FROM search_pending p CROSS JOIN search_docs d ON d.doc = p.doc;
    DELETE FROM search_pending;
END;

-- FTS5 takes a document out by the words it was given, so only an indexed document's old body
-- goes to it; a waiting one has given it nothing yet.
CREATE TRIGGER search_docs_deleted AFTER DELETE ON search_docs BEGIN
    INSERT INTO search_fts (search_fts, rowid, body)
    SELECT 'delete', old.doc, old.body
    WHERE NOT EXISTS (SELECT 1 FROM search_pending WHERE doc = old.doc);
    DELETE FROM search_pending WHERE doc = old.doc;
END;

-- A waiting document's new body is what the batch will take; an indexed one's is re-indexed
-- now (a change of status alone leaves FTS5 alone).
CREATE TRIGGER search_docs_updated AFTER UPDATE OF body ON search_docs
WHEN old.body IS NOT new.body AND NOT EXISTS (SELECT 1 FROM search_pending WHERE doc = old.doc)
BEGIN
    INSERT INTO search_fts (search_fts, rowid, body) VALUES ('delete', old.doc, old.body);
    INSERT INTO search_fts (rowid, body) VALUES (new.doc, new.body);
END;

-- The entities' triggers of migration 0008 again, with their kinds compared one by one: SQLite
-- evaluates `kind IN` a list of three by building a temporary index of the three, and a
-- trigger's WHEN clause did that for every entity a commit wrote (a page cache allocated and
-- freed each time, which also made the allocator hand pages back to the kernel).
DROP TRIGGER entities_searched_inserted;
DROP TRIGGER entities_searched_updated;

CREATE TRIGGER entities_searched_inserted AFTER INSERT ON entities
WHEN new.kind = 'ChatMessage' OR new.kind = 'ChatToolCall' OR new.kind = 'ChatToolResult' BEGIN
    INSERT INTO search_docs (session_id, entity_id, role, tool_name, status, ordinal, body)
    VALUES (
        new.session_id,
        new.entity_id,
        CASE
            WHEN new.kind <> 'ChatMessage' THEN 'tool'
            WHEN json_extract(new.payload_json, '$.segmentType') = 'reasoning' THEN 'reasoning'
            ELSE coalesce(json_extract(new.payload_json, '$.role'), '')
        END,
        coalesce(json_extract(new.payload_json, '$.toolName'), ''),
        coalesce(json_extract(new.payload_json, '$.status'), ''),
        new.created_ordinal,
        CASE WHEN new.tombstone THEN '' ELSE coalesce(
            json_extract(new.payload_json, '$.text'),
            json_extract(new.payload_json, '$.input'),
            json_extract(new.payload_json, '$.result'),
            '') END
    )
    ON CONFLICT (session_id, entity_id) DO NOTHING;
END;

CREATE TRIGGER entities_searched_updated AFTER UPDATE ON entities
WHEN new.kind = 'ChatMessage' OR new.kind = 'ChatToolCall' OR new.kind = 'ChatToolResult' BEGIN
    UPDATE search_docs SET
        role = CASE
            WHEN new.kind <> 'ChatMessage' THEN 'tool'
            WHEN json_extract(new.payload_json, '$.segmentType') = 'reasoning' THEN 'reasoning'
            ELSE coalesce(json_extract(new.payload_json, '$.role'), '')
        END,
        tool_name = coalesce(json_extract(new.payload_json, '$.toolName'), ''),
        status = coalesce(json_extract(new.payload_json, '$.status'), ''),
        body = CASE WHEN new.tombstone THEN '' ELSE coalesce(
            json_extract(new.payload_json, '$.text'),
            json_extract(new.payload_json, '$.input'),
            json_extract(new.payload_json, '$.result'),
            '') END
    WHERE session_id = new.session_id AND entity_id = new.entity_id;
END;
