// CUDA array element sizes, shared by the capture (array_tracker.cpp) and the replay
// (arrays.cpp): both lay an array's contents out packed, row after row, so the payload
// written at capture is the layout the replay copies back.
#pragma once
#include <cuda.h>

namespace kc {

// Bytes of one element of `format` with `channels` channels; 0 when the format is not
// plain rows of elements (planar YUV, block-compressed, packed 10-bit) or the channel
// count does not fit it.
inline unsigned element_bytes(unsigned format, unsigned channels) {
  if (channels != 1 && channels != 2 && channels != 4) return 0;
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return channels;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2 * channels;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4 * channels;
    // The normalized formats name their channel count; NumChannels must agree.
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1: return channels == 1 ? 1 : 0;
    case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2: return channels == 2 ? 2 : 0;
    case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4: return channels == 4 ? 4 : 0;
    case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X1: return channels == 1 ? 2 : 0;
    case CU_AD_FORMAT_UNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X2: return channels == 2 ? 4 : 0;
    case CU_AD_FORMAT_UNORM_INT16X4: case CU_AD_FORMAT_SNORM_INT16X4: return channels == 4 ? 8 : 0;
    default:
      return 0;
  }
}

}  // namespace kc
