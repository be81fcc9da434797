cd scratch_reset
nvcc -cubin -arch=sm_90 k.cu -o k.cubin && g++ -std=c++17 t.cpp -I/usr/local/cuda/include -lcuda -o t -Wno-deprecated-declarations || exit 1
for m in 0 1 2 3; do echo "== mode $m"; timeout 60 ./t $m; done
