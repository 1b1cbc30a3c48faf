-- Full-text search over what sessions said (`reel search`, `GET /v1/search`): one document per
-- message, reasoning block, tool call (its arguments) and tool result, kept by statement triggers
-- on `entities` in the transaction that writes them, so the index is never behind nor ahead of
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

-- A payload as jsonb; jsonb holds no NUL character, so those are left out of the index, and a
-- payload that still does not parse is indexed without its words: a commit never fails for it.
CREATE FUNCTION search_payload_without_nul(payload_text TEXT) RETURNS JSONB AS $$
BEGIN
    RETURN replace(payload_text, '\u0000', '')::jsonb;
EXCEPTION WHEN others THEN
    RETURN '{}'::jsonb;
END;
$$ LANGUAGE plpgsql IMMUTABLE;

CREATE FUNCTION search_payload(payload_text TEXT) RETURNS JSONB AS $$
    SELECT CASE WHEN strpos(payload_text, '\u0000') = 0 THEN payload_text::jsonb
        ELSE search_payload_without_nul(payload_text) END
$$ LANGUAGE sql IMMUTABLE;

-- The search document of the entities in `changed` (a statement's transition table): one
-- INSERT per statement, however many rows the commit upserted.
CREATE FUNCTION entities_searched() RETURNS trigger AS $$
BEGIN
    INSERT INTO search_docs (session_id, entity_id, role, tool_name, status, ordinal, body)
    SELECT c.session_id, c.entity_id,
        CASE
            WHEN c.kind <> 'ChatMessage' THEN 'tool'
            WHEN p.payload->>'segmentType' = 'reasoning' THEN 'reasoning'
            ELSE coalesce(p.payload->>'role', '')
        END,
        coalesce(p.payload->>'toolName', ''),
        coalesce(p.payload->>'status', ''),
        c.created_ordinal,
        CASE WHEN c.tombstone THEN '' ELSE
            coalesce(p.payload->>'text', p.payload->>'input', p.payload->>'result', '') END
    FROM changed c CROSS JOIN LATERAL (SELECT search_payload(c.payload_json) AS payload) p
    WHERE c.kind IN ('ChatMessage', 'ChatToolCall', 'ChatToolResult')
    ON CONFLICT (session_id, entity_id) DO UPDATE SET role = excluded.role,
        tool_name = excluded.tool_name, status = excluded.status, body = excluded.body;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE FUNCTION entities_unsearched() RETURNS trigger AS $$
BEGIN
    DELETE FROM search_docs d USING removed r
    WHERE d.session_id = r.session_id AND d.entity_id = r.entity_id;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER entities_searched_inserted AFTER INSERT ON entities
REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION entities_searched();

CREATE TRIGGER entities_searched_updated AFTER UPDATE ON entities
REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION entities_searched();

CREATE TRIGGER entities_searched_deleted AFTER DELETE ON entities
REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION entities_unsearched();

-- The entities stored before this migration.
INSERT INTO search_docs (session_id, entity_id, role, tool_name, status, ordinal, body)
SELECT e.session_id, e.entity_id,
    CASE
        WHEN e.kind <> 'ChatMessage' THEN 'tool'
        WHEN p.payload->>'segmentType' = 'reasoning' THEN 'reasoning'
        ELSE coalesce(p.payload->>'role', '')
    END,
    coalesce(p.payload->>'toolName', ''),
    coalesce(p.payload->>'status', ''),
    e.created_ordinal,
    CASE WHEN e.tombstone THEN '' ELSE
        coalesce(p.payload->>'text', p.payload->>'input', p.payload->>'result', '') END
FROM entities e CROSS JOIN LATERAL (SELECT search_payload(e.payload_json) AS payload) p
WHERE e.kind IN ('ChatMessage', 'ChatToolCall', 'ChatToolResult');
