# cmake -DINPUT=<file> -DOUTPUT=<header> -DNAME=<symbol> -P embed_file.cmake
# Writes a header defining `alignas(64) static const unsigned char NAME[]` with the bytes.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" n)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# Break the initializer into lines of 32 bytes so compilers and editors cope.
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){32})" "\\1\n" bytes "${bytes}")
math(EXPR size "${n} / 2")
file(WRITE "${OUTPUT}" "// Generated from ${INPUT} by embed_file.cmake; do not edit.\n#pragma once\n#include <cstddef>\nalignas(64) static const unsigned char ${NAME}[] = {\n${bytes}\n};\nstatic const size_t ${NAME}_size = ${size};\n")
