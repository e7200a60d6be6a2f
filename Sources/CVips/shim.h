// libvips (thumbnails, in the thumbnail worker process only) and zlib's crc32 (PNG chunks).
// libvips' calls take NULL-terminated option lists (variadic), which Swift cannot call: each
// call docfs makes is wrapped here as a static inline function with fixed arguments.
#ifndef DOCFS_CVIPS_SHIM_H
#define DOCFS_CVIPS_SHIM_H

#include <stddef.h>
#include <vips/vips.h>
#include <zlib.h>

/// Starts libvips once per process: no operation cache (a long-lived process that renders
/// each file once), `threads` worker threads, loaders marked untrusted allowed (the worker is
/// a process of its own, with limits, for exactly that reason). 0 on success.
static inline int docfs_vips_start(const char *argv0, int threads) {
    if (VIPS_INIT(argv0)) return -1;
    vips_cache_set_max(0);
    vips_concurrency_set(threads);
    return 0;
}

/// The loader libvips would pick for `path` by sniffing its bytes ("VipsForeignLoadJpegFile"),
/// or NULL when none reads it.
static inline const char *docfs_vips_loader(const char *path) {
    const char *loader = vips_foreign_find_load(path);
    if (!loader) vips_error_clear();
    return loader;
}

/// The dimensions of the first page of `path` from its header alone (nothing decoded).
static inline int docfs_vips_header(const char *path, int *width, int *height, int *pages) {
    VipsImage *image = vips_image_new_from_file(path, "access", VIPS_ACCESS_SEQUENTIAL, NULL);
    if (!image) return -1;
    *width = vips_image_get_width(image);
    *height = vips_image_get_page_height(image);
    *pages = vips_image_get_n_pages(image);
    g_object_unref(image);
    return 0;
}

/// The first page of `path` made to fit size×size, with shrink-on-load where the format has it
/// (JPEG, WebP, HEIF, PDF), rotated upright and in sRGB. Pixels are never enlarged, unless
/// `vector` (a PDF page, rendered at whatever scale fits). NULL on failure.
static inline VipsImage *docfs_vips_thumbnail_file(const char *path, int size, int vector) {
    VipsImage *out = NULL;
    if (vips_thumbnail(path, &out, size, "height", size, "size", vector ? VIPS_SIZE_BOTH : VIPS_SIZE_DOWN, NULL)) return NULL;
    return out;
}

/// `in` shrunk (never enlarged) to fit size×size. NULL on failure.
static inline VipsImage *docfs_vips_thumbnail_image(VipsImage *in, int size) {
    VipsImage *out = NULL;
    if (vips_thumbnail_image(in, &out, size, "height", size, "size", VIPS_SIZE_DOWN, NULL)) return NULL;
    return out;
}

/// A PNG file's image, checked strictly: a truncated or damaged file fails. NULL on failure.
static inline VipsImage *docfs_vips_load_png_strictly(const char *path) {
    VipsImage *image = vips_image_new_from_file(path, "fail_on", VIPS_FAIL_ON_TRUNCATED, NULL);
    if (!image) return NULL;
    double mean = 0;
    if (vips_avg(image, &mean, NULL)) {  // decodes every pixel
        g_object_unref(image);
        return NULL;
    }
    return image;
}

/// `in` as 8-bit sRGB (or 8-bit grey), alpha kept: what PNG thumbnails hold. NULL on failure.
static inline VipsImage *docfs_vips_eight_bit(VipsImage *in) {
    VipsInterpretation target = vips_image_get_bands(in) <= 2 ? VIPS_INTERPRETATION_B_W : VIPS_INTERPRETATION_sRGB;
    VipsImage *converted = NULL;
    if (vips_colourspace(in, &converted, target, NULL)) return NULL;
    if (vips_image_get_format(converted) == VIPS_FORMAT_UCHAR) return converted;
    VipsImage *cast = NULL;
    int failed = vips_cast_uchar(converted, &cast, NULL);
    g_object_unref(converted);
    return failed ? NULL : cast;
}

/// `in` computed into memory, so it can be read many times (a loader's image can be read once,
/// in order). NULL on failure.
static inline VipsImage *docfs_vips_in_memory(VipsImage *in) {
    return vips_image_copy_memory(in);
}

/// Encodes `in` as PNG, metadata stripped: truecolour, or (palette != 0) quantised to at most
/// 2^bitdepth colours. The caller frees *buffer with g_free. 0 on success.
static inline int docfs_vips_png(VipsImage *in, int compression, int palette, int bitdepth, void **buffer, size_t *length) {
    if (palette) {
        return vips_pngsave_buffer(in, buffer, length, "compression", compression, "palette", TRUE,
                                   "bitdepth", bitdepth, "effort", 1, "strip", TRUE, NULL);
    }
    return vips_pngsave_buffer(in, buffer, length, "compression", compression, "strip", TRUE, NULL);
}

static inline int docfs_vips_width(VipsImage *image) { return vips_image_get_width(image); }
static inline int docfs_vips_height(VipsImage *image) { return vips_image_get_height(image); }
static inline void docfs_vips_release(VipsImage *image) { if (image) g_object_unref(image); }
static inline void docfs_vips_free(void *buffer) { g_free(buffer); }
/// Frees what libvips keeps per thread; call at the end of a thread that used it.
static inline void docfs_vips_thread_done(void) { vips_thread_shutdown(); }

/// The last error libvips recorded, cleared.
static inline const char *docfs_vips_last_error(void) {
    static __thread char copy[512];
    snprintf(copy, sizeof copy, "%s", vips_error_buffer());
    vips_error_clear();
    size_t n = strlen(copy);
    while (n > 0 && (copy[n - 1] == '\n' || copy[n - 1] == ' ')) copy[--n] = 0;
    return copy;
}

/// zlib's CRC-32, as PNG chunks carry it.
static inline unsigned long docfs_crc32(unsigned long crc, const unsigned char *bytes, unsigned int length) {
    return crc32(crc, bytes, length);
}

#endif
