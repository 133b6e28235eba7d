-- An event's copy of its data, in the dto version of its first delivery,
-- kept on the event's own row rather than as a row of
-- `webhook_event_data` (issue 48's bytes). The intake inserts the event
-- and its deliveries in one unit of work: a copy on the event's row costs
-- its bytes alone, where a row of `webhook_event_data` also costs a tuple
-- header, the event's reference again, and an entry in its primary key
-- (about 190 bytes of WAL and 110 of growth per event).
--
-- `copy_dto_version` and `copy_data` are both set or both null. The copy
-- is stored packed, as in `webhook_event_data` (`dispatch::event_copy`).
-- An event whose deliveries need its data in more than one dto version
-- keeps the others in `webhook_event_data`; so do events accepted before
-- this migration and events fanned out from the embedded queue. Readers
-- look on the event's row first, then there
-- (`dispatch::EVENT_DATA_OF_ROW`, `Dispatch::fill_event_data`), so
-- nothing is rewritten. The copy goes when its event does (retention).
ALTER TABLE events ADD COLUMN copy_dto_version BIGINT;
ALTER TABLE events ADD COLUMN copy_data TEXT;
