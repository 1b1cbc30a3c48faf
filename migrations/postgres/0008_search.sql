-- Full-text search over what sessions said (`reel search`, `GET /v1/search`): one document per
-- message, reasoning block, tool call (its arguments) and tool result, kept by a trigger on
-- `entities` in the transaction that writes them, so the index is never behind nor ahead of
-- the stored entities. `tsv` (the 'simple' configuration: words as written, any language) has
-- a GIN index.
CREATE TABLE search_docs (
    -- Insertion order: the newest documents first.
    doc        BIGINT GENERATED ALWAYS AS IDENTITY,
    session_id TEXT   NOT NULL,
    entity_id  TEXT   NOT NULL,
    -- user, assistant, reasoning or tool.
    role       TEXT   NOT NULL,
    tool_name  TEXT   NOT NULL,
    status     TEXT   NOT NULL,
    -- The ordinal of the event that made the entity.
    ordinal    BIGINT NOT NULL,
    body       TEXT   NOT NULL,
    -- A tsvector holds at most 1 MB: the first 100,000 characters of a text are indexed.
    tsv        tsvector GENERATED ALWAYS AS (to_tsvector('simple', left(body, 100000))) STORED,
    PRIMARY KEY (session_id, entity_id)
);

CREATE INDEX search_docs_tsv ON search_docs USING GIN (tsv);
CREATE INDEX search_docs_doc ON search_docs (doc);

CREATE FUNCTION search_doc_of(kind TEXT, payload_text TEXT, tombstone BOOLEAN, OUT role TEXT,
    OUT tool_name TEXT, OUT status TEXT, OUT body TEXT) AS $$
DECLARE
    payload JSONB;
BEGIN
    IF strpos(payload_text, '\u0000') = 0 THEN
        payload := payload_text::jsonb;
    ELSE
        -- jsonb holds no NUL character: those are left out of the index, and a payload that
        -- still does not parse is indexed without its words. A commit never fails for it.
        BEGIN
            payload := replace(payload_text, '\u0000', '')::jsonb;
        EXCEPTION WHEN others THEN
            payload := '{}'::jsonb;
        END;
    END IF;
    role := CASE
        WHEN kind <> 'ChatMessage' THEN 'tool'
        WHEN payload->>'segmentType' = 'reasoning' THEN 'reasoning'
        ELSE coalesce(payload->>'role', '')
    END;
    tool_name := coalesce(payload->>'toolName', '');
    status := coalesce(payload->>'status', '');
    body := CASE WHEN tombstone THEN '' ELSE
        coalesce(payload->>'text', payload->>'input', payload->>'result', '') END;
END;
$$ LANGUAGE plpgsql IMMUTABLE;

CREATE FUNCTION entities_searched() RETURNS trigger AS $$
DECLARE
    doc RECORD;
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM search_docs WHERE session_id = OLD.session_id AND entity_id = OLD.entity_id;
        RETURN OLD;
    END IF;
    IF NEW.kind NOT IN ('ChatMessage', 'ChatToolCall', 'ChatToolResult') THEN
        RETURN NEW;
    END IF;
    doc := search_doc_of(NEW.kind, NEW.payload_json, NEW.tombstone);
    INSERT INTO search_docs (session_id, entity_id, role, tool_name, status, ordinal, body)
    VALUES (NEW.session_id, NEW.entity_id, doc.role, doc.tool_name, doc.status,
        NEW.created_ordinal, doc.body)
    ON CONFLICT (session_id, entity_id) DO UPDATE SET role = excluded.role,
        tool_name = excluded.tool_name, status = excluded.status, body = excluded.body;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER entities_searched AFTER INSERT OR UPDATE OR DELETE ON entities
FOR EACH ROW EXECUTE FUNCTION entities_searched();

-- The entities stored before this migration.
INSERT INTO search_docs (session_id, entity_id, role, tool_name, status, ordinal, body)
SELECT e.session_id, e.entity_id, d.role, d.tool_name, d.status, e.created_ordinal, d.body
FROM entities e, search_doc_of(e.kind, e.payload_json, e.tombstone) d
WHERE e.kind IN ('ChatMessage', 'ChatToolCall', 'ChatToolResult');
