-- Replays the delivery lifecycle in batches; each step of each batch is its own transaction.
-- kind: 'single' (A, D: public.webhook_deliveries), 'split' (B), 'splitc' (C), 'born' (W:
-- public.webhook_deliveries inserted with its settled state, no lease and no settle)
-- outcome: 'succeeded' | 'failed'
-- Step LSN ranges and xids are kept in plpgsql arrays (no writes between steps) and dumped
-- into the temp table steplog at the end.
CREATE OR REPLACE PROCEDURE run_lifecycle(kind text, outcome text, nbatches int, bsize int)
LANGUAGE plpgsql AS $proc$
DECLARE
  base   bigint := 1795987468565;   -- created_at(i) = base + 10*i (ms)
  b int; lo bigint; hi bigint; refs text[];
  t_hi bigint;
  s_batch int[] := '{}'; s_step text[] := '{}'; s_start pg_lsn[] := '{}'; s_end pg_lsn[] := '{}'; s_xid xid8[] := '{}';
  st pg_lsn; x xid8; k int;
  rclass text := CASE outcome WHEN 'succeeded' THEN '2xx' ELSE '5xx' END;
  ins_single text := $q$
    INSERT INTO public.webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, event_ref,
      public_event_type, dto_version, status, diagnostic, generation, attempt_count, next_attempt_at,
      last_attempt_at, occurred_at, event_data, match_reasons, body_status, payload, created_at,
      updated_at, version, lease_owner, lease_until, last_response_class)
    SELECT 'whd_'||lpad(to_hex(i),12,'0'), 'env_4Usv0VUT6ePh', 'whep_4UthzoaVrKja', 'evt_'||lpad(to_hex(i),12,'0'),
      'order.created', 1, 'pending', 0, 1, 0, $1+10*i, NULL, $1+10*i-4, '', 'null', 'available', NULL, $1+10*i,
      $1+10*i, 1, NULL, NULL, NULL
    FROM generate_series($2::bigint, $3::bigint) i $q$;
  ins_imm text := $q$
    INSERT INTO split.webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, event_ref,
      public_event_type, dto_version, diagnostic, occurred_at, event_data, match_reasons, created_at)
    SELECT 'whd_'||lpad(to_hex(i),12,'0'), 'env_4Usv0VUT6ePh', 'whep_4UthzoaVrKja', 'evt_'||lpad(to_hex(i),12,'0'),
      'order.created', 1, 0, $1+10*i-4, '', 'null', $1+10*i
    FROM generate_series($2::bigint, $3::bigint) i $q$;
  ins_state_b text := $q$
    INSERT INTO split.webhook_delivery_states (delivery_ref, status, generation, attempt_count, next_attempt_at,
      last_attempt_at, payload, body_status, updated_at, version, lease_owner, lease_until, last_response_class,
      endpoint_ref, environment_ref, created_at, public_event_type)
    SELECT 'whd_'||lpad(to_hex(i),12,'0'), 'pending', 1, 0, $1+10*i, NULL, NULL, 'available', $1+10*i, 1, NULL, NULL, NULL,
      'whep_4UthzoaVrKja', 'env_4Usv0VUT6ePh', $1+10*i, 'order.created'
    FROM generate_series($2::bigint, $3::bigint) i $q$;
  ins_state_c text := $q$
    INSERT INTO split.webhook_delivery_states (delivery_ref, status, generation, attempt_count, next_attempt_at,
      last_attempt_at, payload, body_status, updated_at, version, lease_owner, lease_until, last_response_class)
    SELECT 'whd_'||lpad(to_hex(i),12,'0'), 'pending', 1, 0, $1+10*i, NULL, NULL, 'available', $1+10*i, 1, NULL, NULL, NULL
    FROM generate_series($2::bigint, $3::bigint) i $q$;
  ins_born text := $q$
    INSERT INTO public.webhook_deliveries (delivery_ref, environment_ref, endpoint_ref, event_ref,
      public_event_type, dto_version, status, diagnostic, generation, attempt_count, next_attempt_at,
      last_attempt_at, occurred_at, event_data, match_reasons, body_status, payload, created_at,
      updated_at, version, lease_owner, lease_until, last_response_class, success_status,
      success_duration_ms, success_excerpt)
    SELECT 'whd_'||lpad(to_hex(i),12,'0'), 'env_4Usv0VUT6ePh', 'whep_4UthzoaVrKja', 'evt_'||lpad(to_hex(i),12,'0'),
      'order.created', 1, $4, 0, 1, 1, NULL, $1+10*i+3, $1+10*i-4, '', 'null', 'available', '', $1+10*i,
      $1+10*i+26, 2, NULL, NULL, $5, CASE WHEN $4 = 'succeeded' THEN 200 END,
      CASE WHEN $4 = 'succeeded' THEN 23 END, CASE WHEN $4 = 'succeeded' THEN '' END
    FROM generate_series($2::bigint, $3::bigint) i $q$;
  tgt text := CASE kind WHEN 'single' THEN 'public.webhook_deliveries' ELSE 'split.webhook_delivery_states' END;
BEGIN
  FOR b IN 0 .. nbatches-1 LOOP
    lo := b::bigint*bsize; hi := lo + bsize - 1; t_hi := base + 10*hi;
    refs := ARRAY(SELECT 'whd_'||lpad(to_hex(i),12,'0') FROM generate_series(lo, hi) i);

    FOR k IN 1..3 LOOP
      st := pg_current_wal_insert_lsn();
      IF k = 1 THEN
        IF kind = 'single' THEN
          EXECUTE ins_single USING base, lo, hi;
        ELSIF kind = 'born' THEN
          EXECUTE ins_born USING base, lo, hi, outcome, rclass;
        ELSE
          EXECUTE ins_imm USING base, lo, hi;
          EXECUTE CASE kind WHEN 'split' THEN ins_state_b ELSE ins_state_c END USING base, lo, hi;
        END IF;
      ELSIF kind = 'born' THEN
        NULL;              -- born settled: nothing to lease or settle
      ELSIF k = 2 THEN     -- take lease
        EXECUTE format('UPDATE %s SET lease_owner = $2, lease_until = $3 WHERE delivery_ref = ANY($1)', tgt)
          USING refs, 'dsp_4UtAbCdEfGhIj', t_hi + 30000;
      ELSE                 -- settle
        EXECUTE format($q$UPDATE %s SET status = $2, attempt_count = 1, next_attempt_at = NULL,
            last_attempt_at = $3, payload = '', last_response_class = $4, body_status = 'available',
            lease_owner = NULL, lease_until = NULL, updated_at = $5, version = version + 1%s
          WHERE delivery_ref = ANY($1)$q$, tgt, CASE WHEN kind = 'single' AND outcome = 'succeeded'
            THEN ', success_status = 200, success_duration_ms = 23, success_excerpt = ''''' ELSE '' END)
          USING refs, outcome, t_hi + 3, rclass, t_hi + 26;
        IF kind = 'splitc' AND outcome = 'failed' THEN
          UPDATE split.webhook_deliveries SET failed_at = t_hi + 26, failed_response_class = rclass
           WHERE delivery_ref = ANY(refs);
        END IF;
      END IF;
      x := pg_current_xact_id();
      COMMIT;
      s_batch := s_batch || b; s_step := s_step || (ARRAY['1_insert','2_lease','3_settle'])[k];
      s_start := s_start || st; s_end := s_end || pg_current_wal_insert_lsn(); s_xid := s_xid || x;
    END LOOP;
  END LOOP;
  INSERT INTO steplog SELECT * FROM unnest(s_batch, s_step, s_start, s_end, s_xid);
  COMMIT;
END
$proc$;
