--sql
UPDATE results SET m = 4096.7;