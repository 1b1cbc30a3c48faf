-- Token usage and cost of each run, and of its session up to the run's end.
-- input_tokens counts every input token (cached ones included); cached_tokens those served
-- from the provider's cache; cost_usd is 0 unless the command file declares prices.
ALTER TABLE turns
    ADD COLUMN input_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN output_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN cached_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    ADD COLUMN session_input_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN session_output_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN session_cached_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN session_cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0;
