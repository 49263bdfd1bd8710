--sql
UPDATE devices SET sm_count = 4294967428, name = 'a' || char(0) || 'b';