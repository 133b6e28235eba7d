-- An event's data is stored once for each dto version its deliveries
-- carry, not once in each delivery (issue 48's bytes). A fan-out to ten
-- endpoints on one version stores one copy, and a delivery's row, which
-- is written again when it is leased and when it settles, no longer
-- carries the data each time: about 600 bytes less in every version of
-- every row.
--
-- A delivery whose `event_data` is empty reads it here, by its event and
-- dto version. Deliveries written before keep their own copy, and a test
-- send (which has no event) keeps its own. The retention sweep deletes an
-- event's copies with the event, once no delivery of it is left.
CREATE TABLE webhook_event_data (
    event_ref   TEXT NOT NULL,
    dto_version BIGINT NOT NULL,
    data        TEXT NOT NULL,
    PRIMARY KEY (event_ref, dto_version)
);
