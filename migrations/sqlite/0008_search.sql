-- Full-text search over what sessions said (`reel search`, `GET /v1/search`): one document per
-- message, reasoning block, tool call (its arguments) and tool result, kept by triggers on
-- `entities` in the transaction that writes them, so the index is never behind nor ahead of
-- the stored entities. `search_fts` (FTS5) indexes `search_docs.body`.
CREATE TABLE search_docs (
    doc        INTEGER PRIMARY KEY,
    session_id TEXT    NOT NULL,
    entity_id  TEXT    NOT NULL,
    -- user, assistant, reasoning or tool.
    role       TEXT    NOT NULL,
    tool_name  TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    -- The ordinal of the event that made the entity.
    ordinal    INTEGER NOT NULL,
    body       TEXT    NOT NULL,
    UNIQUE (session_id, entity_id)
);

CREATE VIRTUAL TABLE search_fts USING fts5(
    body,
    content = 'search_docs',
    content_rowid = 'doc',
    tokenize = 'unicode61 remove_diacritics 2',
    -- No per-document sizes: hits come newest first, never ranked by size (fewer writes).
    columnsize = 0
);

CREATE TRIGGER search_docs_inserted AFTER INSERT ON search_docs BEGIN
    INSERT INTO search_fts (rowid, body) VALUES (new.doc, new.body);
END;

CREATE TRIGGER search_docs_deleted AFTER DELETE ON search_docs BEGIN
    INSERT INTO search_fts (search_fts, rowid, body) VALUES ('delete', old.doc, old.body);
END;

CREATE TRIGGER search_docs_updated AFTER UPDATE ON search_docs BEGIN
    INSERT INTO search_fts (search_fts, rowid, body) VALUES ('delete', old.doc, old.body);
    INSERT INTO search_fts (rowid, body) VALUES (new.doc, new.body);
END;

CREATE TRIGGER entities_searched_inserted AFTER INSERT ON entities
WHEN new.kind IN ('ChatMessage', 'ChatToolCall', 'ChatToolResult') BEGIN
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
WHEN new.kind IN ('ChatMessage', 'ChatToolCall', 'ChatToolResult') BEGIN
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

CREATE TRIGGER entities_searched_deleted AFTER DELETE ON entities BEGIN
    DELETE FROM search_docs WHERE session_id = old.session_id AND entity_id = old.entity_id;
END;

-- The entities stored before this migration.
INSERT INTO search_docs (session_id, entity_id, role, tool_name, status, ordinal, body)
SELECT
    session_id,
    entity_id,
    CASE
        WHEN kind <> 'ChatMessage' THEN 'tool'
        WHEN json_extract(payload_json, '$.segmentType') = 'reasoning' THEN 'reasoning'
        ELSE coalesce(json_extract(payload_json, '$.role'), '')
    END,
    coalesce(json_extract(payload_json, '$.toolName'), ''),
    coalesce(json_extract(payload_json, '$.status'), ''),
    created_ordinal,
    CASE WHEN tombstone THEN '' ELSE coalesce(
        json_extract(payload_json, '$.text'),
        json_extract(payload_json, '$.input'),
        json_extract(payload_json, '$.result'),
        '') END
FROM entities
WHERE kind IN ('ChatMessage', 'ChatToolCall', 'ChatToolResult');
