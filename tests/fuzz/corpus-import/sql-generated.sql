--sql
ALTER TABLE results ADD COLUMN x AS (length(hex(zeroblob(300000000))));