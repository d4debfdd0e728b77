# python3 tests/golden/make_kdb_golden.py -- builds tests/golden/fin_fixtures.kdb.dump by applying MITuna's write_kdb row rules
# (tuna/miopen/subcmd/export_db.py; docs/miopen-formats.md §4.1-§4.2) to fin's recorded kernel
# objects. The stored blob is base64decode(fin blob), exactly what MITuna stores.
import base64, bz2, hashlib, json, os
HERE = os.path.dirname(os.path.abspath(__file__))
F = os.environ.get('SHOAL_FIN_FIXTURES', os.path.join(HERE, '../fin-fixtures')) + '/'
def q(s): return "'" + s.replace("'", "''") + "'"
def blob(b): return f"blob({len(b)},{hashlib.md5(b).hexdigest()})"
find_in = json.load(open(F + 'fin_input_find_eval.json'))[0]['miopen_find_compile_result'][0]['kernel_objects'][0]
perf = json.load(open(F + 'fin_output_perf_compile.json'))[1]['miopen_perf_compile_result'][0]['kernel_objects']
# (kernel_file, comp_options, arch, stored bytes, md5 of uncompressed, uncompressed_size)
rows = []
for k, arch in [(find_in, 'gfx906'), (perf[0], 'gfx906'), (perf[1], 'gfx906'), (find_in, 'gfx906')]:
    rows.append((k['kernel_file'], k['comp_options'], arch, base64.b64decode(k['blob']), k['md5_sum'], k['uncompressed_size']))
mlir = b'\x7fELF-mlir'
rows.append(('mlir_gen_igemm_conv2d_v4r4_fwd.mlir', ' --x2 1 --operation conv2d', 'gfx906', mlir, hashlib.md5(mlir).hexdigest(), 0))
bundle = b'__CLANG_OFFLOAD_BUNDLE__' * 200
rows.append(('naive_conv.cpp.o', ' -DMIOPEN_USE_FP32=1 -mcpu=gfx906', 'gfx906', bz2.compress(bundle, 9), hashlib.md5(bundle).hexdigest(), len(bundle)))
out = ["## sqlite_master",
 "'table'|'kern_db'|'kern_db'|'CREATE TABLE `kern_db` (`id` INTEGER PRIMARY KEY ASC,`kernel_name` TEXT NOT NULL,`kernel_args` TEXT NOT NULL,`kernel_blob` BLOB NOT NULL,`kernel_hash` TEXT NOT NULL,`uncompressed_size` INT NOT NULL)'",
 "'index'|'idx_kern_db'|'kern_db'|'CREATE UNIQUE INDEX `idx_kern_db` ON kern_db(kernel_name, kernel_args)'",
 "## kern_db"]
seen = []
for name, args, arch, stored, md5, size in rows:
    if not name.endswith('.o'): name += '.o'
    if '-mcpu=' not in args and not name.endswith('.mlir.o'): args += f' -mcpu={arch}'
    if (name, args) in seen: continue
    seen.append((name, args))
    out.append('|'.join([str(len(seen)), q(name), q(args), blob(stored), q(md5), str(size)]))
open(os.path.join(HERE, 'fin_fixtures.kdb.dump'), 'w').write('\n'.join(out) + '\n')
