-- Invoice lines (contract 14.1): every invoice has `lines`, a JSON array
-- of `{kind, amount, price_ref, period_start, period_end, description}`
-- (amount: signed minor units of the invoice's currency; period bounds:
-- Unix milliseconds or null), written with the invoice in the unit of work
-- that makes it. `amount_total` stays a column and is the lines' sum.
ALTER TABLE invoices ADD COLUMN lines TEXT;

-- Invoices issued before lines existed get one line derived from the
-- invoice: `period` (of its subscription's price) when it bills a
-- subscription, else `item`, of its whole `amount_total`. Their period
-- bounds, and a one-time invoice's price, were not recorded: null.
UPDATE invoices SET lines =
    '[{"kind":"'
    || CASE WHEN subscription_ref IS NULL THEN 'item' ELSE 'period' END
    || '","amount":' || CAST(amount_total AS TEXT)
    || ',"price_ref":'
    || COALESCE(
        '"' || (SELECT subscriptions.price_ref FROM subscriptions
                WHERE subscriptions.subscription_ref = invoices.subscription_ref) || '"',
        'null')
    || ',"period_start":null,"period_end":null,"description":"'
    || CASE WHEN subscription_ref IS NULL THEN 'Checkout items' ELSE 'Subscription period' END
    || '"}]'
WHERE lines IS NULL;
