-- The search documents are written by the store in the statement that writes their entities
-- (storage/src/postgres_search_docs.rs), no longer by statement triggers: two PL/pgSQL calls
-- per upsert, each reading a transition table and parsing every payload again as jsonb, cost
-- more than the documents themselves. Removing entities still removes their documents by the
-- DELETE trigger of 0008 (removals are rare and carry no payload to parse).
--
-- Every reel that writes this database must be at least this version: an older one would
-- store entities without their documents (and refuses a database migrated past it when it
-- opens one, so restart every process on the new version together).
DROP TRIGGER entities_searched_inserted ON entities;
DROP TRIGGER entities_searched_updated ON entities;
DROP FUNCTION entities_searched();

-- The store computes `tsv` itself, only when a document's body changes: PostgreSQL computes a
-- generated column again on every UPDATE, as for a tool call whose status alone changed.
-- NOT NULL: a writer that left it out would make a document no search can find.
ALTER TABLE search_docs ALTER COLUMN tsv DROP EXPRESSION;
ALTER TABLE search_docs ALTER COLUMN tsv SET NOT NULL;

-- A document and its tsvector (about 2 KB for a reply of 100 words) stay in the row up to a
-- page, uncompressed: past the default of 2 KB, every insert compressed the tsvector (which
-- barely compresses) and moved it into the TOAST table, an insert there and into its index.
ALTER TABLE search_docs SET (toast_tuple_target = 8160);
