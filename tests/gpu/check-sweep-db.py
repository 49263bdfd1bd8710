"""check-sweep-db.py DB KEYS - the database after sweeps of a spec with KEYS
keys: SQLite's integrity check, one result per key, no claim left behind,
and no key tuned twice (a key tuned once has one trial per candidate).
Prints one line; exits 0 when all of that holds."""
import sqlite3
import sys

c = sqlite3.connect(sys.argv[1])
want = int(sys.argv[2])
integrity = c.execute("pragma integrity_check").fetchone()[0]
results = c.execute("select count(*) from results").fetchone()[0]
claims = c.execute("select count(*) from claims").fetchone()[0]
twice = c.execute("""select count(*) from results r where r.candidates !=
    (select count(*) from trials t where t.device_id = r.device_id and t.op = r.op
     and t.dtype = r.dtype and t.layout = r.layout and t.m = r.m and t.n = r.n
     and t.k = r.k and t.aligned = r.aligned)""").fetchone()[0]
print(f"integrity {integrity}, {results} results for {want} keys, {claims} claims left, "
      f"{twice} keys tuned more than once")
ok = integrity == "ok" and want > 0 and results == want and claims == 0 and twice == 0
sys.exit(0 if ok else 1)
