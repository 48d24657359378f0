package cuda

// hostJSONSource is the first half of lum_load_prepared: the limits it
// reads a prepared weights file (safetensors) within, and the JSON reader
// of the file's header (strings decoded in place, integers, objects, a
// tensor's entry, the metadata's program digest) with shapeText for its
// messages.
const hostJSONSource = `// ---- lum_load_prepared: the prepared weights file (safetensors) ----

constexpr unsigned long long kMaxHeaderBytes = 100000000ULL;  // the reference implementation's limit
constexpr unsigned long long kMaxInteger = 9223372036854775807ULL;
constexpr int kMaxRank = 32;
constexpr size_t kStagingBytes = 8u << 20;

// Cursor reads JSON from the header, which it may rewrite: strings are
// decoded in place. why is the first error.
struct Cursor {
    char* p;
    char* start;
    char* end;
    const char* why;
    bool stop(const char* reason) {
        if (why == nullptr) {
            why = reason;
        }
        return false;
    }
};

void space(Cursor& c) {
    while (c.p < c.end && (*c.p == ' ' || *c.p == '\t' || *c.p == '\n' || *c.p == '\r')) {
        c.p++;
    }
}

bool literal(Cursor& c, char ch, const char* reason) {
    space(c);
    if (c.p == c.end || *c.p != ch) {
        return c.stop(reason);
    }
    c.p++;
    return true;
}

// peek skips spaces and reports whether the next character is ch,
// consuming it when it is.
bool peek(Cursor& c, char ch) {
    space(c);
    if (c.p < c.end && *c.p == ch) {
        c.p++;
        return true;
    }
    return false;
}

bool hex4(Cursor& c, const char** r, unsigned* v) {
    if (c.end - *r < 4) {
        return c.stop("a \\u escape cut short");
    }
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = (*r)[i];
        unsigned d;
        if (ch >= '0' && ch <= '9') {
            d = static_cast<unsigned>(ch - '0');
        } else if (ch >= 'a' && ch <= 'f') {
            d = static_cast<unsigned>(ch - 'a' + 10);
        } else if (ch >= 'A' && ch <= 'F') {
            d = static_cast<unsigned>(ch - 'A' + 10);
        } else {
            return c.stop("an invalid \\u escape");
        }
        *v = *v * 16 + d;
    }
    *r += 4;
    return true;
}

// jsonString decodes the string at the cursor in place (the decoded text
// is never longer than its JSON) and NUL-terminates it.
bool jsonString(Cursor& c, char** out) {
    space(c);
    if (c.p == c.end || *c.p != '"') {
        return c.stop("expected a string");
    }
    char* w = c.p;
    const char* r = c.p + 1;
    *out = w;
    for (;;) {
        if (r == c.end) {
            return c.stop("a string is not terminated");
        }
        unsigned char ch = static_cast<unsigned char>(*r);
        if (ch == '"') {
            r++;
            break;
        }
        if (ch < 0x20) {
            return c.stop("a control character in a string");
        }
        if (ch != '\\') {
            *w++ = *r++;
            continue;
        }
        if (++r == c.end) {
            return c.stop("a string is not terminated");
        }
        char e = *r++;
        switch (e) {
        case '"':
        case '\\':
        case '/':
            *w++ = e;
            break;
        case 'b':
            *w++ = '\b';
            break;
        case 'f':
            *w++ = '\f';
            break;
        case 'n':
            *w++ = '\n';
            break;
        case 'r':
            *w++ = '\r';
            break;
        case 't':
            *w++ = '\t';
            break;
        case 'u': {
            unsigned cp;
            if (!hex4(c, &r, &cp)) {
                return false;
            }
            if (cp >= 0xD800 && cp < 0xDC00) {
                unsigned lo;
                if (c.end - r < 2 || r[0] != '\\' || r[1] != 'u') {
                    return c.stop("an unpaired surrogate in a string");
                }
                r += 2;
                if (!hex4(c, &r, &lo)) {
                    return false;
                }
                if (lo < 0xDC00 || lo >= 0xE000) {
                    return c.stop("an unpaired surrogate in a string");
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                return c.stop("an unpaired surrogate in a string");
            }
            if (cp == 0) {
                return c.stop("a string holds \\u0000");
            }
            if (cp < 0x80) {
                *w++ = static_cast<char>(cp);
            } else if (cp < 0x800) {
                *w++ = static_cast<char>(0xC0 | (cp >> 6));
                *w++ = static_cast<char>(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                *w++ = static_cast<char>(0xE0 | (cp >> 12));
                *w++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
                *w++ = static_cast<char>(0x80 | (cp & 0x3F));
            } else {
                *w++ = static_cast<char>(0xF0 | (cp >> 18));
                *w++ = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
                *w++ = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
                *w++ = static_cast<char>(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            return c.stop("an invalid escape in a string");
        }
    }
    *w = '\0';
    c.p = const_cast<char*>(r);
    return true;
}

// jsonInteger reads a non-negative integer below 2^63.
bool jsonInteger(Cursor& c, unsigned long long* v) {
    space(c);
    if (c.p == c.end || *c.p < '0' || *c.p > '9') {
        return c.stop("expected a non-negative integer");
    }
    if (*c.p == '0' && c.p + 1 < c.end && c.p[1] >= '0' && c.p[1] <= '9') {
        return c.stop("a number with a leading zero");
    }
    unsigned long long x = 0;
    while (c.p < c.end && *c.p >= '0' && *c.p <= '9') {
        unsigned d = static_cast<unsigned>(*c.p - '0');
        if (x > (kMaxInteger - d) / 10) {
            return c.stop("a number of 2^63 or more");
        }
        x = x * 10 + d;
        c.p++;
    }
    if (c.p < c.end && (*c.p == '.' || *c.p == 'e' || *c.p == 'E')) {
        return c.stop("expected an integer");
    }
    *v = x;
    return true;
}

// jsonIntegers reads an array of at most max integers.
bool jsonIntegers(Cursor& c, unsigned long long* out, int max, int* n) {
    if (!literal(c, '[', "expected an array")) {
        return false;
    }
    *n = 0;
    if (peek(c, ']')) {
        return true;
    }
    for (;;) {
        unsigned long long v;
        if (!jsonInteger(c, &v)) {
            return false;
        }
        if (*n == max) {
            return c.stop("an array too long");
        }
        out[(*n)++] = v;
        if (peek(c, ',')) {
            continue;
        }
        return literal(c, ']', "expected , or ] in an array");
    }
}

// Objects: objectStart reads '{' and says whether a member follows;
// objectNext reads ',' (another follows) or '}' (none).
bool objectStart(Cursor& c, bool* more) {
    if (!literal(c, '{', "expected an object")) {
        return false;
    }
    *more = !peek(c, '}');
    return true;
}

bool objectNext(Cursor& c, bool* more) {
    if (peek(c, ',')) {
        *more = true;
        return true;
    }
    *more = false;
    return literal(c, '}', "expected , or } in an object");
}

// Entry is one tensor's header record.
struct Entry {
    char* dtype;
    unsigned long long shape[kMaxRank];
    int rank;
    unsigned long long offsets[2];
    int noffsets;
    bool has[3];
};

bool jsonEntry(Cursor& c, Entry* e) {
    bool more;
    if (!objectStart(c, &more)) {
        return false;
    }
    while (more) {
        char* key;
        if (!jsonString(c, &key) || !literal(c, ':', "expected : after a key")) {
            return false;
        }
        int field;
        bool ok;
        if (strcmp(key, "dtype") == 0) {
            field = 0;
            ok = !e->has[0] && jsonString(c, &e->dtype);
        } else if (strcmp(key, "shape") == 0) {
            field = 1;
            ok = !e->has[1] && jsonIntegers(c, e->shape, kMaxRank, &e->rank);
        } else if (strcmp(key, "data_offsets") == 0) {
            field = 2;
            ok = !e->has[2] && jsonIntegers(c, e->offsets, 2, &e->noffsets);
        } else {
            return c.stop("an unknown field (want dtype, shape and data_offsets)");
        }
        if (!ok) {
            return c.stop("a field given twice");  // when no other error was set
        }
        e->has[field] = true;
        if (!objectNext(c, &more)) {
            return false;
        }
    }
    return true;
}

// jsonMetadata reads the "__metadata__" object of strings and finds the
// program digest in it.
bool jsonMetadata(Cursor& c, const char** digest) {
    bool more;
    if (!objectStart(c, &more)) {
        return false;
    }
    while (more) {
        char* key;
        char* value;
        if (!jsonString(c, &key) || !literal(c, ':', "expected : after a key") || !jsonString(c, &value)) {
            return false;
        }
        if (strcmp(key, kDigestKey) == 0) {
            if (*digest != nullptr) {
                return c.stop("two program digests in the metadata");
            }
            *digest = value;
        }
        if (!objectNext(c, &more)) {
            return false;
        }
    }
    return true;
}

// shapeText writes a shape as the library's messages do: [4 64].
void shapeText(char* out, size_t n, const unsigned long long* shape, int rank) {
    size_t at = 0;
    at += static_cast<size_t>(snprintf(out, n, "["));
    for (int i = 0; i < rank && at < n; i++) {
        at += static_cast<size_t>(snprintf(out + at, n - at, i > 0 ? " %llu" : "%llu", shape[i]));
    }
    if (at < n) {
        snprintf(out + at, n - at, "]");
    }
}

`
