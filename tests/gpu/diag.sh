# Ad-hoc diagnosis on the GPU machine: capture axpy with KERNCAP_DEBUG=1 and resolve a crash.
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-build-isolation --no-deps . > $OUT/build.log 2>&1 || tail -30 $OUT/build.log
cmake -S testapps -B /tmp/bt -G Ninja > /dev/null && ninja -C /tmp/bt > /dev/null || echo BUILD FAIL
LIB=$(python3 -c "import kerncap.core.native as n; print(n.inject_library())")
diag() {  # app kernel
  rm -rf /tmp/run1; mkdir -p /tmp/run1
  KERNCAP_DEBUG=1 KERNCAP_MODE=capture KERNCAP_OUT=/tmp/run1 KERNCAP_KERNEL=$2 KERNCAP_MATCH=substring KERNCAP_DISPATCH=0 KERNCAP_KEEP_RUNNING=1 \
  CUDA_INJECTION64_PATH=$LIB timeout 60 "${@:3}" $1 2> /tmp/err.txt; echo "== $1 rc=$?"
  tail -40 /tmp/err.txt | tee /tmp/err2.txt
  grep -o 'libkerncap_inject.so+0x[0-9a-f]*' /tmp/err2.txt | sed 's/.*+//' | xargs -r addr2line -f -C -i -e $LIB | paste - - | head -30
  ls /tmp/run1 /tmp/run1/capture* 2>/dev/null | head; cat /tmp/run1/capture*/interposer.log 2>/dev/null | tail -20; head -c 600 /tmp/run1/proc-*.json
}
diag /tmp/bt/axpy_inplace axpy
