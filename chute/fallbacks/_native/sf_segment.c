/* Decode frames [start, start + frames) of an audio file held in memory, with libsndfile,
 * without calling back into Python (docs/design.md, "Audio").
 *
 * soundfile's virtual I/O calls a Python method for every read, seek and tell libsndfile
 * makes (about 60 per segment); each needs the GIL, so decoding threads queued behind each
 * other and a second thread made decoding slower. Here the virtual I/O works on the bytes
 * directly and the whole segment is one foreign call, during which ctypes releases the GIL.
 *
 * libsndfile is not linked: its functions come in as pointers taken from the library
 * soundfile loaded (struct sf_api), so the shim needs no headers and matches that library.
 * The declarations below are libsndfile's stable public ABI (sndfile.h).
 */
#include <stdint.h>
#include <string.h>

typedef int64_t sf_count_t;

typedef struct {
    sf_count_t frames;
    int samplerate;
    int channels;
    int format;
    int sections;
    int seekable;
} SF_INFO;

typedef struct {
    sf_count_t (*get_filelen)(void *user);
    sf_count_t (*seek)(sf_count_t offset, int whence, void *user);
    sf_count_t (*read)(void *ptr, sf_count_t count, void *user);
    sf_count_t (*write)(const void *ptr, sf_count_t count, void *user);
    sf_count_t (*tell)(void *user);
} SF_VIRTUAL_IO;

typedef void SNDFILE;

struct sf_api {
    SNDFILE *(*open_virtual)(SF_VIRTUAL_IO *io, int mode, SF_INFO *info, void *user);
    sf_count_t (*seek)(SNDFILE *f, sf_count_t frames, int whence);
    sf_count_t (*readf_float)(SNDFILE *f, float *ptr, sf_count_t frames);
    int (*close)(SNDFILE *f);
};

#define SFM_READ 0x10

/* Return codes (mirrored in _audio_segment.py). */
enum {
    SEG_OK = 0,
    SEG_UNREADABLE = 1,   /* libsndfile does not open the bytes */
    SEG_RATE = 2,         /* the file's rate is not the expected one */
    SEG_CHANNELS = 3,     /* the file's channel count is not the expected one */
    SEG_RANGE = 4,        /* the segment ends past the file's last frame */
    SEG_SEEK = 5,         /* seeking to the first frame failed */
    SEG_SHORT = 6,        /* a corrupt or truncated frame ended the read early */
};

struct memory {
    const uint8_t *data;
    sf_count_t size;
    sf_count_t position;
};

static sf_count_t mem_filelen(void *user) { return ((struct memory *)user)->size; }

static sf_count_t mem_seek(sf_count_t offset, int whence, void *user) {
    struct memory *m = user;
    sf_count_t base = whence == 0 ? 0 : whence == 1 ? m->position : m->size;
    sf_count_t target = base + offset;
    if (target < 0) target = 0;
    if (target > m->size) target = m->size;
    m->position = target;
    return target;
}

static sf_count_t mem_read(void *ptr, sf_count_t count, void *user) {
    struct memory *m = user;
    sf_count_t left = m->size - m->position;
    if (count > left) count = left;
    if (count <= 0) return 0;
    memcpy(ptr, m->data + m->position, (size_t)count);
    m->position += count;
    return count;
}

static sf_count_t mem_write(const void *ptr, sf_count_t count, void *user) {
    (void)ptr; (void)count; (void)user;
    return 0;
}

static sf_count_t mem_tell(void *user) { return ((struct memory *)user)->position; }

/* Decode `frames` frames from frame `start` as interleaved float32 into `out` (room for
 * frames * channels values). `rate` and `channels` are what the dataset's columns say. */
int chute_sf_segment(const struct sf_api *api, const uint8_t *data, int64_t size,
                     int64_t start, int64_t frames, int32_t rate, int32_t channels,
                     float *out) {
    struct memory m = {data, size, 0};
    SF_VIRTUAL_IO io = {mem_filelen, mem_seek, mem_read, mem_write, mem_tell};
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *f = api->open_virtual(&io, SFM_READ, &info, &m);
    if (f == NULL) return SEG_UNREADABLE;
    int code = SEG_OK;
    if (info.samplerate != rate) {
        code = SEG_RATE;
    } else if (info.channels != channels) {
        code = SEG_CHANNELS;
    } else if (start < 0 || frames < 0 || start + frames > info.frames) {
        code = SEG_RANGE;
    } else if (api->seek(f, start, 0) != start) {
        code = SEG_SEEK;
    } else {
        sf_count_t done = 0;
        while (done < frames) {
            sf_count_t n = api->readf_float(f, out + done * channels, frames - done);
            if (n <= 0) break;
            done += n;
        }
        if (done != frames) code = SEG_SHORT;
    }
    api->close(f);
    return code;
}
