--sql
UPDATE results SET config = 'BLOCK_M=16', time_us = 'fast', aligned = 7;