/*
 * Big-endian (network order) reads for odradek's C extensions (records/_walk.c,
 * protocol/_lone.c): Kafka's wire and log formats store every fixed-width integer so.
 * The caller checks the bounds.
 */
#ifndef ODRADEK_BIGENDIAN_H
#define ODRADEK_BIGENDIAN_H

#include <stdint.h>

static inline int64_t
be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static inline int32_t
be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

static inline int16_t
be16(const uint8_t *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

#endif
