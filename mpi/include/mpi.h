/*
 * meshwork's MPI: the MPI-5.0 standard ABI (handle types, constant values
 * and calling convention from the standard's ABI tables), implemented by
 * libmpi_abi over meshwork's process groups. Build with `mpicc` beside this
 * header (mpi/bin/mpicc), run with `meshrun -n N -- ./prog` or any launcher
 * Node::from_env() knows (srun, torchrun, Kubernetes, RANK/WORLD/PEERS).
 *
 * Every function of the ABI that meshwork does not implement is exported
 * and returns MPI_ERR_UNSUPPORTED_OPERATION after calling the error
 * handler; those declared here are the ones it implements and the ones
 * the common clients (the OSU micro-benchmarks) name.
 */
#ifndef MESHWORK_MPI_H
#define MESHWORK_MPI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MPI_VERSION 5
#define MPI_SUBVERSION 0
#define MPI_ABI_VERSION 1
#define MPI_ABI_SUBVERSION 0

typedef intptr_t MPI_Aint;
typedef int64_t MPI_Offset;
typedef int64_t MPI_Count;

typedef struct {
    int MPI_SOURCE;
    int MPI_TAG;
    int MPI_ERROR;
    int MPI_internal[5];
} MPI_Status;

/* Handles: pointers to incomplete types; the predefined ones are small
 * constants from the ABI's tables. */
typedef struct MPI_ABI_Op *MPI_Op;
typedef struct MPI_ABI_Comm *MPI_Comm;
typedef struct MPI_ABI_Group *MPI_Group;
typedef struct MPI_ABI_Win *MPI_Win;
typedef struct MPI_ABI_File *MPI_File;
typedef struct MPI_ABI_Session *MPI_Session;
typedef struct MPI_ABI_Message *MPI_Message;
typedef struct MPI_ABI_Info *MPI_Info;
typedef struct MPI_ABI_Errhandler *MPI_Errhandler;
typedef struct MPI_ABI_Request *MPI_Request;
typedef struct MPI_ABI_Datatype *MPI_Datatype;

#define MPI_OP_NULL     ((MPI_Op)0x020)
#define MPI_SUM         ((MPI_Op)0x021)
#define MPI_MIN         ((MPI_Op)0x022)
#define MPI_MAX         ((MPI_Op)0x023)
#define MPI_PROD        ((MPI_Op)0x024)
#define MPI_BAND        ((MPI_Op)0x028)
#define MPI_BOR         ((MPI_Op)0x029)
#define MPI_BXOR        ((MPI_Op)0x02a)
#define MPI_LAND        ((MPI_Op)0x030)
#define MPI_LOR         ((MPI_Op)0x031)
#define MPI_LXOR        ((MPI_Op)0x032)
#define MPI_MINLOC      ((MPI_Op)0x038)
#define MPI_MAXLOC      ((MPI_Op)0x039)
#define MPI_REPLACE     ((MPI_Op)0x03c)
#define MPI_NO_OP       ((MPI_Op)0x03d)

#define MPI_COMM_NULL   ((MPI_Comm)0x100)
#define MPI_COMM_WORLD  ((MPI_Comm)0x101)
#define MPI_COMM_SELF   ((MPI_Comm)0x102)
#define MPI_GROUP_NULL  ((MPI_Group)0x108)
#define MPI_GROUP_EMPTY ((MPI_Group)0x109)
#define MPI_WIN_NULL    ((MPI_Win)0x110)
#define MPI_FILE_NULL   ((MPI_File)0x118)
#define MPI_SESSION_NULL ((MPI_Session)0x120)
#define MPI_MESSAGE_NULL ((MPI_Message)0x128)
#define MPI_MESSAGE_NO_PROC ((MPI_Message)0x129)
#define MPI_INFO_NULL   ((MPI_Info)0x130)
#define MPI_INFO_ENV    ((MPI_Info)0x131)
#define MPI_ERRHANDLER_NULL  ((MPI_Errhandler)0x140)
#define MPI_ERRORS_ARE_FATAL ((MPI_Errhandler)0x141)
#define MPI_ERRORS_ABORT     ((MPI_Errhandler)0x142)
#define MPI_ERRORS_RETURN    ((MPI_Errhandler)0x143)
#define MPI_REQUEST_NULL ((MPI_Request)0x180)

#define MPI_DATATYPE_NULL      ((MPI_Datatype)0x200)
#define MPI_AINT               ((MPI_Datatype)0x201)
#define MPI_COUNT              ((MPI_Datatype)0x202)
#define MPI_OFFSET             ((MPI_Datatype)0x203)
#define MPI_PACKED             ((MPI_Datatype)0x207)
#define MPI_SHORT              ((MPI_Datatype)0x208)
#define MPI_INT                ((MPI_Datatype)0x209)
#define MPI_LONG               ((MPI_Datatype)0x20a)
#define MPI_LONG_LONG          ((MPI_Datatype)0x20b)
#define MPI_LONG_LONG_INT      MPI_LONG_LONG
#define MPI_UNSIGNED_SHORT     ((MPI_Datatype)0x20c)
#define MPI_UNSIGNED           ((MPI_Datatype)0x20d)
#define MPI_UNSIGNED_LONG      ((MPI_Datatype)0x20e)
#define MPI_UNSIGNED_LONG_LONG ((MPI_Datatype)0x20f)
#define MPI_FLOAT              ((MPI_Datatype)0x210)
#define MPI_C_FLOAT_COMPLEX    ((MPI_Datatype)0x212)
#define MPI_C_COMPLEX          MPI_C_FLOAT_COMPLEX
#define MPI_CXX_FLOAT_COMPLEX  ((MPI_Datatype)0x213)
#define MPI_DOUBLE             ((MPI_Datatype)0x214)
#define MPI_C_DOUBLE_COMPLEX   ((MPI_Datatype)0x216)
#define MPI_CXX_DOUBLE_COMPLEX ((MPI_Datatype)0x217)
#define MPI_LOGICAL            ((MPI_Datatype)0x218)
#define MPI_INTEGER            ((MPI_Datatype)0x219)
#define MPI_REAL               ((MPI_Datatype)0x21a)
#define MPI_COMPLEX            ((MPI_Datatype)0x21b)
#define MPI_DOUBLE_PRECISION   ((MPI_Datatype)0x21c)
#define MPI_DOUBLE_COMPLEX     ((MPI_Datatype)0x21d)
#define MPI_CHARACTER          ((MPI_Datatype)0x21e)
#define MPI_LONG_DOUBLE        ((MPI_Datatype)0x220)
#define MPI_C_LONG_DOUBLE_COMPLEX   ((MPI_Datatype)0x224)
#define MPI_CXX_LONG_DOUBLE_COMPLEX ((MPI_Datatype)0x225)
#define MPI_FLOAT_INT          ((MPI_Datatype)0x228)
#define MPI_DOUBLE_INT         ((MPI_Datatype)0x229)
#define MPI_LONG_INT           ((MPI_Datatype)0x22a)
#define MPI_2INT               ((MPI_Datatype)0x22b)
#define MPI_SHORT_INT          ((MPI_Datatype)0x22c)
#define MPI_LONG_DOUBLE_INT    ((MPI_Datatype)0x22d)
#define MPI_2REAL              ((MPI_Datatype)0x230)
#define MPI_2DOUBLE_PRECISION  ((MPI_Datatype)0x231)
#define MPI_2INTEGER           ((MPI_Datatype)0x232)
#define MPI_C_BOOL             ((MPI_Datatype)0x238)
#define MPI_CXX_BOOL           ((MPI_Datatype)0x239)
#define MPI_WCHAR              ((MPI_Datatype)0x23c)
#define MPI_INT8_T             ((MPI_Datatype)0x240)
#define MPI_UINT8_T            ((MPI_Datatype)0x241)
#define MPI_CHAR               ((MPI_Datatype)0x243)
#define MPI_SIGNED_CHAR        ((MPI_Datatype)0x244)
#define MPI_UNSIGNED_CHAR      ((MPI_Datatype)0x245)
#define MPI_BYTE               ((MPI_Datatype)0x247)
#define MPI_INT16_T            ((MPI_Datatype)0x248)
#define MPI_UINT16_T           ((MPI_Datatype)0x249)
#define MPI_INT32_T            ((MPI_Datatype)0x250)
#define MPI_UINT32_T           ((MPI_Datatype)0x251)
#define MPI_INT64_T            ((MPI_Datatype)0x258)
#define MPI_UINT64_T           ((MPI_Datatype)0x259)
#define MPI_LOGICAL1           ((MPI_Datatype)0x2c0)
#define MPI_INTEGER1           ((MPI_Datatype)0x2c1)
#define MPI_LOGICAL2           ((MPI_Datatype)0x2c8)
#define MPI_INTEGER2           ((MPI_Datatype)0x2c9)
#define MPI_REAL2              ((MPI_Datatype)0x2ca)
#define MPI_LOGICAL4           ((MPI_Datatype)0x2d0)
#define MPI_INTEGER4           ((MPI_Datatype)0x2d1)
#define MPI_REAL4              ((MPI_Datatype)0x2d2)
#define MPI_COMPLEX4           ((MPI_Datatype)0x2d3)
#define MPI_LOGICAL8           ((MPI_Datatype)0x2d8)
#define MPI_INTEGER8           ((MPI_Datatype)0x2d9)
#define MPI_REAL8              ((MPI_Datatype)0x2da)
#define MPI_COMPLEX8           ((MPI_Datatype)0x2db)
#define MPI_LOGICAL16          ((MPI_Datatype)0x2e0)
#define MPI_INTEGER16          ((MPI_Datatype)0x2e1)
#define MPI_REAL16             ((MPI_Datatype)0x2e2)
#define MPI_COMPLEX16          ((MPI_Datatype)0x2e3)
#define MPI_COMPLEX32          ((MPI_Datatype)0x2eb)

/* Error classes. */
enum {
    MPI_SUCCESS = 0,
    MPI_ERR_BUFFER = 1, MPI_ERR_COUNT = 2, MPI_ERR_TYPE = 3, MPI_ERR_TAG = 4,
    MPI_ERR_COMM = 5, MPI_ERR_RANK = 6, MPI_ERR_REQUEST = 7, MPI_ERR_ROOT = 8,
    MPI_ERR_GROUP = 9, MPI_ERR_OP = 10, MPI_ERR_TOPOLOGY = 11, MPI_ERR_DIMS = 12,
    MPI_ERR_ARG = 13, MPI_ERR_UNKNOWN = 14, MPI_ERR_TRUNCATE = 15,
    MPI_ERR_OTHER = 16, MPI_ERR_INTERN = 17, MPI_ERR_PENDING = 18,
    MPI_ERR_IN_STATUS = 19, MPI_ERR_ACCESS = 20, MPI_ERR_AMODE = 21,
    MPI_ERR_ASSERT = 22, MPI_ERR_BAD_FILE = 23, MPI_ERR_BASE = 24,
    MPI_ERR_CONVERSION = 25, MPI_ERR_DISP = 26, MPI_ERR_DUP_DATAREP = 27,
    MPI_ERR_FILE_EXISTS = 28, MPI_ERR_FILE_IN_USE = 29, MPI_ERR_FILE = 30,
    MPI_ERR_INFO_KEY = 31, MPI_ERR_INFO_NOKEY = 32, MPI_ERR_INFO_VALUE = 33,
    MPI_ERR_INFO = 34, MPI_ERR_IO = 35, MPI_ERR_KEYVAL = 36,
    MPI_ERR_LOCKTYPE = 37, MPI_ERR_NAME = 38, MPI_ERR_NO_MEM = 39,
    MPI_ERR_NOT_SAME = 40, MPI_ERR_NO_SPACE = 41, MPI_ERR_NO_SUCH_FILE = 42,
    MPI_ERR_PORT = 43, MPI_ERR_QUOTA = 44, MPI_ERR_READ_ONLY = 45,
    MPI_ERR_RMA_ATTACH = 46, MPI_ERR_RMA_CONFLICT = 47, MPI_ERR_RMA_RANGE = 48,
    MPI_ERR_RMA_SHARED = 49, MPI_ERR_RMA_SYNC = 50, MPI_ERR_SERVICE = 51,
    MPI_ERR_SIZE = 52, MPI_ERR_SPAWN = 53, MPI_ERR_UNSUPPORTED_DATAREP = 54,
    MPI_ERR_UNSUPPORTED_OPERATION = 55, MPI_ERR_WIN = 56,
    MPI_ERR_RMA_FLAVOR = 57, MPI_ERR_PROC_ABORTED = 58,
    MPI_ERR_VALUE_TOO_LARGE = 59, MPI_ERR_SESSION = 60,
    MPI_ERR_ERRHANDLER = 61, MPI_ERR_ABI = 62,
    MPI_ERR_LASTCODE = 16383
};

#define MPI_BOTTOM           ((void *)0)
#define MPI_IN_PLACE         ((void *)1)
#define MPI_BUFFER_AUTOMATIC ((void *)2)
#define MPI_ARGV_NULL        ((char **)0)
#define MPI_ARGVS_NULL       ((char ***)0)
#define MPI_ERRCODES_IGNORE  ((int *)0)
#define MPI_STATUS_IGNORE    ((MPI_Status *)0)
#define MPI_STATUSES_IGNORE  ((MPI_Status *)0)
#define MPI_UNWEIGHTED       ((int *)10)
#define MPI_WEIGHTS_EMPTY    ((int *)11)

#define MPI_MAX_DATAREP_STRING 128
#define MPI_MAX_ERROR_STRING 512
#define MPI_MAX_INFO_KEY 256
#define MPI_MAX_INFO_VAL 1024
#define MPI_MAX_LIBRARY_VERSION_STRING 8192
#define MPI_MAX_OBJECT_NAME 128
#define MPI_MAX_PORT_NAME 1024
#define MPI_MAX_PROCESSOR_NAME 256
#define MPI_MAX_STRINGTAG_LEN 1024
#define MPI_MAX_PSET_NAME_LEN 1024
#define MPI_BSEND_OVERHEAD 512

enum {
    MPI_ANY_SOURCE = -1,
    MPI_ANY_TAG = -2,
    MPI_PROC_NULL = -3,
    MPI_ROOT = -4,
    MPI_UNDEFINED = -32766
};

enum {
    MPI_THREAD_SINGLE = 0,
    MPI_THREAD_FUNNELED = 1024,
    MPI_THREAD_SERIALIZED = 2048,
    MPI_THREAD_MULTIPLE = 4096,
    MPI_ORDER_C = 12,
    MPI_ORDER_FORTRAN = 15,
    MPI_COMBINER_NAMED = 101,
    MPI_COMBINER_DUP = 102,
    MPI_COMBINER_CONTIGUOUS = 103,
    MPI_COMBINER_VECTOR = 104,
    MPI_COMBINER_HVECTOR = 105,
    MPI_COMBINER_INDEXED = 106,
    MPI_COMBINER_HINDEXED = 107,
    MPI_COMBINER_INDEXED_BLOCK = 108,
    MPI_COMBINER_HINDEXED_BLOCK = 109,
    MPI_COMBINER_STRUCT = 110,
    MPI_COMBINER_SUBARRAY = 111,
    MPI_COMBINER_DARRAY = 112,
    MPI_COMBINER_F90_REAL = 113,
    MPI_COMBINER_F90_COMPLEX = 114,
    MPI_COMBINER_F90_INTEGER = 115,
    MPI_COMBINER_RESIZED = 116,
    MPI_COMBINER_VALUE_INDEX = 117,
    MPI_IDENT = 201,
    MPI_CONGRUENT = 202,
    MPI_SIMILAR = 203,
    MPI_UNEQUAL = 204,
    MPI_CART = 211,
    MPI_GRAPH = 212,
    MPI_DIST_GRAPH = 213,
    MPI_COMM_TYPE_SHARED = 221,
    MPI_COMM_TYPE_HW_UNGUIDED = 222,
    MPI_COMM_TYPE_HW_GUIDED = 223,
    MPI_COMM_TYPE_RESOURCE_GUIDED = 224,
    MPI_LOCK_EXCLUSIVE = 301,
    MPI_LOCK_SHARED = 302
};

/* Handles as ints and back; address arithmetic */
int MPI_Comm_toint(MPI_Comm comm);
MPI_Comm MPI_Comm_fromint(int i);
int MPI_Errhandler_toint(MPI_Errhandler errhandler);
MPI_Errhandler MPI_Errhandler_fromint(int i);
int MPI_File_toint(MPI_File file);
MPI_File MPI_File_fromint(int i);
int MPI_Group_toint(MPI_Group group);
MPI_Group MPI_Group_fromint(int i);
int MPI_Info_toint(MPI_Info info);
MPI_Info MPI_Info_fromint(int i);
int MPI_Message_toint(MPI_Message message);
MPI_Message MPI_Message_fromint(int i);
int MPI_Op_toint(MPI_Op op);
MPI_Op MPI_Op_fromint(int i);
int MPI_Request_toint(MPI_Request request);
MPI_Request MPI_Request_fromint(int i);
int MPI_Session_toint(MPI_Session session);
MPI_Session MPI_Session_fromint(int i);
int MPI_Type_toint(MPI_Datatype datatype);
MPI_Datatype MPI_Type_fromint(int i);
int MPI_Win_toint(MPI_Win win);
MPI_Win MPI_Win_fromint(int i);
MPI_Aint MPI_Aint_add(MPI_Aint base, MPI_Aint disp);
MPI_Aint MPI_Aint_diff(MPI_Aint addr1, MPI_Aint addr2);

/* Environment */
int MPI_Init(int *argc, char ***argv);
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
int MPI_Finalize(void);
int MPI_Initialized(int *flag);
int MPI_Finalized(int *flag);
int MPI_Abort(MPI_Comm comm, int errorcode);
int MPI_Query_thread(int *provided);
int MPI_Is_thread_main(int *flag);
int MPI_Get_version(int *version, int *subversion);
int MPI_Get_library_version(char *version, int *resultlen);
int MPI_Get_processor_name(char *name, int *resultlen);
double MPI_Wtime(void);
double MPI_Wtick(void);
int MPI_Pcontrol(const int level, ...);
int MPI_Error_string(int errorcode, char *string, int *resultlen);
int MPI_Error_class(int errorcode, int *errorclass);
int MPI_Add_error_class(int *errorclass);
int MPI_Add_error_code(int errorclass, int *errorcode);
int MPI_Add_error_string(int errorcode, const char *string);
int MPI_Remove_error_class(int errorclass);
int MPI_Remove_error_code(int errorcode);
int MPI_Remove_error_string(int errorcode);
typedef void MPI_Comm_errhandler_function(MPI_Comm *comm, int *errorcode, ...);
int MPI_Comm_create_errhandler(MPI_Comm_errhandler_function *comm_errhandler_fn,
                               MPI_Errhandler *errhandler);
int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler);
int MPI_Comm_get_errhandler(MPI_Comm comm, MPI_Errhandler *errhandler);
int MPI_Comm_call_errhandler(MPI_Comm comm, int errorcode);
int MPI_Errhandler_free(MPI_Errhandler *errhandler);
int MPI_Abi_get_version(int *abi_major, int *abi_minor);

/* Communicators and groups */
int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm);
int MPI_Comm_free(MPI_Comm *comm);
int MPI_Comm_compare(MPI_Comm comm1, MPI_Comm comm2, int *result);
int MPI_Comm_set_name(MPI_Comm comm, const char *comm_name);
int MPI_Comm_get_name(MPI_Comm comm, char *comm_name, int *resultlen);
int MPI_Comm_test_inter(MPI_Comm comm, int *flag);
int MPI_Comm_create_from_group(MPI_Group group, const char *stringtag, MPI_Info info,
                               MPI_Errhandler errhandler, MPI_Comm *newcomm);
int MPI_Group_free(MPI_Group *group);
int MPI_Group_from_session_pset(MPI_Session session, const char *pset_name, MPI_Group *newgroup);
int MPI_Session_init(MPI_Info info, MPI_Errhandler errhandler, MPI_Session *session);
int MPI_Session_finalize(MPI_Session *session);
int MPI_Info_create(MPI_Info *info);
int MPI_Info_create_env(int argc, char *argv[], MPI_Info *info);
int MPI_Get_hw_resource_info(MPI_Info *hw_info);
int MPI_Info_set(MPI_Info info, const char *key, const char *value);
int MPI_Info_free(MPI_Info *info);

/* Attributes */
enum {
    MPI_KEYVAL_INVALID = 0,
    MPI_TAG_UB = 501,
    MPI_IO = 502,
    MPI_HOST = 503,
    MPI_WTIME_IS_GLOBAL = 504,
    MPI_APPNUM = 505,
    MPI_LASTUSEDCODE = 506,
    MPI_UNIVERSE_SIZE = 507
};
typedef int(MPI_Comm_copy_attr_function)(MPI_Comm comm, int keyval, void *extra_state,
                                         void *attribute_val_in, void *attribute_val_out,
                                         int *flag);
typedef int(MPI_Comm_delete_attr_function)(MPI_Comm comm, int keyval, void *attribute_val,
                                           void *extra_state);
#define MPI_COMM_NULL_COPY_FN ((MPI_Comm_copy_attr_function *)0x0)
#define MPI_COMM_DUP_FN ((MPI_Comm_copy_attr_function *)0x1)
#define MPI_COMM_NULL_DELETE_FN ((MPI_Comm_delete_attr_function *)0x0)
int MPI_Comm_create_keyval(MPI_Comm_copy_attr_function *comm_copy_attr_fn,
                           MPI_Comm_delete_attr_function *comm_delete_attr_fn, int *comm_keyval,
                           void *extra_state);
int MPI_Comm_free_keyval(int *comm_keyval);
int MPI_Comm_set_attr(MPI_Comm comm, int comm_keyval, void *attribute_val);
int MPI_Comm_get_attr(MPI_Comm comm, int comm_keyval, void *attribute_val, int *flag);
int MPI_Comm_delete_attr(MPI_Comm comm, int comm_keyval);
int MPI_Comm_group(MPI_Comm comm, MPI_Group *group);
int MPI_Group_size(MPI_Group group, int *size);
int MPI_Group_rank(MPI_Group group, int *rank);
int MPI_Group_translate_ranks(MPI_Group group1, int n, const int ranks1[], MPI_Group group2,
                              int ranks2[]);
int MPI_Group_compare(MPI_Group group1, MPI_Group group2, int *result);
int MPI_Dims_create(int nnodes, int ndims, int dims[]);
int MPI_Group_union(MPI_Group group1, MPI_Group group2, MPI_Group *newgroup);
int MPI_Group_intersection(MPI_Group group1, MPI_Group group2, MPI_Group *newgroup);
int MPI_Group_difference(MPI_Group group1, MPI_Group group2, MPI_Group *newgroup);
int MPI_Group_incl(MPI_Group group, int n, const int ranks[], MPI_Group *newgroup);
int MPI_Group_excl(MPI_Group group, int n, const int ranks[], MPI_Group *newgroup);
int MPI_Group_range_incl(MPI_Group group, int n, int ranges[][3], MPI_Group *newgroup);
int MPI_Group_range_excl(MPI_Group group, int n, int ranges[][3], MPI_Group *newgroup);
int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm);
int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm);
int MPI_Comm_idup(MPI_Comm comm, MPI_Comm *newcomm, MPI_Request *request);
int MPI_Comm_get_parent(MPI_Comm *parent);
int MPI_Topo_test(MPI_Comm comm, int *status);
int MPI_Cart_create(MPI_Comm comm_old, int ndims, const int dims[], const int periods[],
                    int reorder, MPI_Comm *comm_cart);
int MPI_Cartdim_get(MPI_Comm comm, int *ndims);
int MPI_Cart_get(MPI_Comm comm, int maxdims, int dims[], int periods[], int coords[]);
int MPI_Cart_rank(MPI_Comm comm, const int coords[], int *rank);
int MPI_Cart_coords(MPI_Comm comm, int rank, int maxdims, int coords[]);
int MPI_Cart_shift(MPI_Comm comm, int direction, int disp, int *rank_source, int *rank_dest);
int MPI_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm);
int MPI_Cart_map(MPI_Comm comm, int ndims, const int dims[], const int periods[], int *newrank);
int MPI_Graph_create(MPI_Comm comm_old, int nnodes, const int index[], const int edges[],
                     int reorder, MPI_Comm *comm_graph);
int MPI_Graphdims_get(MPI_Comm comm, int *nnodes, int *nedges);
int MPI_Graph_get(MPI_Comm comm, int maxindex, int maxedges, int index[], int edges[]);
int MPI_Graph_neighbors_count(MPI_Comm comm, int rank, int *nneighbors);
int MPI_Graph_neighbors(MPI_Comm comm, int rank, int maxneighbors, int neighbors[]);
int MPI_Graph_map(MPI_Comm comm, int nnodes, const int index[], const int edges[], int *newrank);
/* The weights are pointers, not arrays: MPI_UNWEIGHTED and
 * MPI_WEIGHTS_EMPTY are sentinels no compiler may take for arrays. */
int MPI_Dist_graph_create_adjacent(MPI_Comm comm_old, int indegree, const int sources[],
                                   const int *sourceweights, int outdegree,
                                   const int destinations[], const int *destweights,
                                   MPI_Info info, int reorder, MPI_Comm *comm_dist_graph);
int MPI_Dist_graph_create(MPI_Comm comm_old, int n, const int sources[], const int degrees[],
                          const int destinations[], const int *weights, MPI_Info info,
                          int reorder, MPI_Comm *comm_dist_graph);
int MPI_Dist_graph_neighbors_count(MPI_Comm comm, int *indegree, int *outdegree, int *weighted);
int MPI_Dist_graph_neighbors(MPI_Comm comm, int maxindegree, int sources[], int *sourceweights,
                             int maxoutdegree, int destinations[], int *destweights);
/* Neighbourhood collectives (blocking, non-blocking, persistent; int and _c). */
int MPI_Neighbor_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                           int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Ineighbor_allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                            void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                            MPI_Request *request);
int MPI_Neighbor_allgather_init(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                                void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                                MPI_Info info, MPI_Request *request);
int MPI_Neighbor_allgather_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                             void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype,
                             MPI_Comm comm);
int MPI_Ineighbor_allgather_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                              void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype,
                              MPI_Comm comm, MPI_Request *request);
int MPI_Neighbor_allgather_init_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                                  void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype,
                                  MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Neighbor_allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                            void *recvbuf, const int recvcounts[], const int displs[],
                            MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Ineighbor_allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                             void *recvbuf, const int recvcounts[], const int displs[],
                             MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
int MPI_Neighbor_allgatherv_init(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                                 void *recvbuf, const int recvcounts[], const int displs[],
                                 MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                                 MPI_Request *request);
int MPI_Neighbor_allgatherv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                              void *recvbuf, const MPI_Count recvcounts[], const MPI_Aint displs[],
                              MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Ineighbor_allgatherv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                               void *recvbuf, const MPI_Count recvcounts[], const MPI_Aint displs[],
                               MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
int MPI_Neighbor_allgatherv_init_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                                   void *recvbuf, const MPI_Count recvcounts[],
                                   const MPI_Aint displs[], MPI_Datatype recvtype, MPI_Comm comm,
                                   MPI_Info info, MPI_Request *request);
int MPI_Neighbor_alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                          int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Ineighbor_alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                           int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                           MPI_Request *request);
int MPI_Neighbor_alltoall_init(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                               void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                               MPI_Info info, MPI_Request *request);
int MPI_Neighbor_alltoall_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                            void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype,
                            MPI_Comm comm);
int MPI_Ineighbor_alltoall_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                             void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype,
                             MPI_Comm comm, MPI_Request *request);
int MPI_Neighbor_alltoall_init_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                                 void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype,
                                 MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Neighbor_alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                           MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                           const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Ineighbor_alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                            MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                            const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                            MPI_Request *request);
int MPI_Neighbor_alltoallv_init(const void *sendbuf, const int sendcounts[], const int sdispls[],
                                MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                                const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                                MPI_Info info, MPI_Request *request);
int MPI_Neighbor_alltoallv_c(const void *sendbuf, const MPI_Count sendcounts[],
                             const MPI_Aint sdispls[], MPI_Datatype sendtype, void *recvbuf,
                             const MPI_Count recvcounts[], const MPI_Aint rdispls[],
                             MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Ineighbor_alltoallv_c(const void *sendbuf, const MPI_Count sendcounts[],
                              const MPI_Aint sdispls[], MPI_Datatype sendtype, void *recvbuf,
                              const MPI_Count recvcounts[], const MPI_Aint rdispls[],
                              MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
int MPI_Neighbor_alltoallv_init_c(const void *sendbuf, const MPI_Count sendcounts[],
                                  const MPI_Aint sdispls[], MPI_Datatype sendtype, void *recvbuf,
                                  const MPI_Count recvcounts[], const MPI_Aint rdispls[],
                                  MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                                  MPI_Request *request);
int MPI_Neighbor_alltoallw(const void *sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                           const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[],
                           const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm);
int MPI_Ineighbor_alltoallw(const void *sendbuf, const int sendcounts[], const MPI_Aint sdispls[],
                            const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[],
                            const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm,
                            MPI_Request *request);
int MPI_Neighbor_alltoallw_init(const void *sendbuf, const int sendcounts[],
                                const MPI_Aint sdispls[], const MPI_Datatype sendtypes[],
                                void *recvbuf, const int recvcounts[], const MPI_Aint rdispls[],
                                const MPI_Datatype recvtypes[], MPI_Comm comm, MPI_Info info,
                                MPI_Request *request);
int MPI_Neighbor_alltoallw_c(const void *sendbuf, const MPI_Count sendcounts[],
                             const MPI_Aint sdispls[], const MPI_Datatype sendtypes[],
                             void *recvbuf, const MPI_Count recvcounts[], const MPI_Aint rdispls[],
                             const MPI_Datatype recvtypes[], MPI_Comm comm);
int MPI_Ineighbor_alltoallw_c(const void *sendbuf, const MPI_Count sendcounts[],
                              const MPI_Aint sdispls[], const MPI_Datatype sendtypes[],
                              void *recvbuf, const MPI_Count recvcounts[], const MPI_Aint rdispls[],
                              const MPI_Datatype recvtypes[], MPI_Comm comm, MPI_Request *request);
int MPI_Neighbor_alltoallw_init_c(const void *sendbuf, const MPI_Count sendcounts[],
                                  const MPI_Aint sdispls[], const MPI_Datatype sendtypes[],
                                  void *recvbuf, const MPI_Count recvcounts[],
                                  const MPI_Aint rdispls[], const MPI_Datatype recvtypes[],
                                  MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Pack(const void *inbuf, int incount, MPI_Datatype datatype, void *outbuf, int outsize,
             int *position, MPI_Comm comm);
int MPI_Pack_c(const void *inbuf, MPI_Count incount, MPI_Datatype datatype, void *outbuf,
               MPI_Count outsize, MPI_Count *position, MPI_Comm comm);
int MPI_Pack_external(const char datarep[], const void *inbuf, int incount,
                      MPI_Datatype datatype, void *outbuf, MPI_Aint outsize,
                      MPI_Aint *position);
int MPI_Pack_external_c(const char datarep[], const void *inbuf, MPI_Count incount,
                        MPI_Datatype datatype, void *outbuf, MPI_Count outsize,
                        MPI_Count *position);
int MPI_Unpack_external(const char datarep[], const void *inbuf, MPI_Aint insize,
                        MPI_Aint *position, void *outbuf, int outcount, MPI_Datatype datatype);
int MPI_Unpack_external_c(const char datarep[], const void *inbuf, MPI_Count insize,
                          MPI_Count *position, void *outbuf, MPI_Count outcount,
                          MPI_Datatype datatype);
int MPI_Pack_external_size(const char datarep[], int incount, MPI_Datatype datatype,
                           MPI_Aint *size);
int MPI_Pack_external_size_c(const char datarep[], MPI_Count incount, MPI_Datatype datatype,
                             MPI_Count *size);
int MPI_Unpack(const void *inbuf, int insize, int *position, void *outbuf, int outcount,
               MPI_Datatype datatype, MPI_Comm comm);
int MPI_Unpack_c(const void *inbuf, MPI_Count insize, MPI_Count *position, void *outbuf,
                 MPI_Count outcount, MPI_Datatype datatype, MPI_Comm comm);
int MPI_Pack_size(int incount, MPI_Datatype datatype, MPI_Comm comm, int *size);
int MPI_Pack_size_c(MPI_Count incount, MPI_Datatype datatype, MPI_Comm comm, MPI_Count *size);
int MPI_Alloc_mem(MPI_Aint size, MPI_Info info, void *baseptr);
int MPI_Free_mem(void *base);

/* Point to point */
int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);
int MPI_Ssend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);
int MPI_Rsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);
int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
             MPI_Status *status);
int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
              MPI_Request *request);
int MPI_Issend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
               MPI_Request *request);
int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
              MPI_Request *request);
int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void *recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                 MPI_Comm comm, MPI_Status *status);
int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype datatype, int dest, int sendtag,
                         int source, int recvtag, MPI_Comm comm, MPI_Status *status);
int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status);
int MPI_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status);
int MPI_Get_count(const MPI_Status *status, MPI_Datatype datatype, int *count);
int MPI_Get_elements(const MPI_Status *status, MPI_Datatype datatype, int *count);
int MPI_Wait(MPI_Request *request, MPI_Status *status);
int MPI_Waitall(int count, MPI_Request array_of_requests[], MPI_Status array_of_statuses[]);
int MPI_Waitany(int count, MPI_Request array_of_requests[], int *index, MPI_Status *status);
int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status);
int MPI_Testall(int count, MPI_Request array_of_requests[], int *flag,
                MPI_Status array_of_statuses[]);
int MPI_Testany(int count, MPI_Request array_of_requests[], int *index, int *flag,
                MPI_Status *status);
int MPI_Request_free(MPI_Request *request);
int MPI_Request_get_status(MPI_Request request, int *flag, MPI_Status *status);
int MPI_Request_get_status_any(int count, const MPI_Request array_of_requests[], int *index,
                               int *flag, MPI_Status *status);
int MPI_Request_get_status_all(int count, const MPI_Request array_of_requests[], int *flag,
                               MPI_Status array_of_statuses[]);
int MPI_Request_get_status_some(int incount, const MPI_Request array_of_requests[], int *outcount,
                                int array_of_indices[], MPI_Status array_of_statuses[]);
int MPI_Cancel(MPI_Request *request);
int MPI_Test_cancelled(const MPI_Status *status, int *flag);
int MPI_Waitsome(int incount, MPI_Request array_of_requests[], int *outcount,
                 int array_of_indices[], MPI_Status array_of_statuses[]);
int MPI_Testsome(int incount, MPI_Request array_of_requests[], int *outcount,
                 int array_of_indices[], MPI_Status array_of_statuses[]);
int MPI_Send_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                  MPI_Comm comm, MPI_Request *request);
int MPI_Recv_init(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                  MPI_Request *request);
int MPI_Start(MPI_Request *request);
int MPI_Startall(int count, MPI_Request array_of_requests[]);
int MPI_Bsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);
int MPI_Buffer_attach(void *buffer, int size);
int MPI_Buffer_detach(void *buffer_addr, int *size);
int MPI_Isendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest,
                  int sendtag, void *recvbuf, int recvcount, MPI_Datatype recvtype, int source,
                  int recvtag, MPI_Comm comm, MPI_Request *request);
int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status);
int MPI_Improbe(int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message,
                MPI_Status *status);
int MPI_Mrecv(void *buf, int count, MPI_Datatype datatype, MPI_Message *message,
              MPI_Status *status);
typedef int MPI_Grequest_query_function(void *extra_state, MPI_Status *status);
typedef int MPI_Grequest_free_function(void *extra_state);
typedef int MPI_Grequest_cancel_function(void *extra_state, int complete);
int MPI_Grequest_start(MPI_Grequest_query_function *query_fn,
                       MPI_Grequest_free_function *free_fn,
                       MPI_Grequest_cancel_function *cancel_fn, void *extra_state,
                       MPI_Request *request);
int MPI_Grequest_complete(MPI_Request request);
int MPI_Status_set_source(MPI_Status *status, int source);
int MPI_Status_set_tag(MPI_Status *status, int tag);
int MPI_Status_set_error(MPI_Status *status, int error);
int MPI_Status_set_elements(MPI_Status *status, MPI_Datatype datatype, int count);
int MPI_Status_get_source(const MPI_Status *status, int *source);
int MPI_Status_get_tag(const MPI_Status *status, int *tag);
int MPI_Status_get_error(const MPI_Status *status, int *error);

/* Collectives */
int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               int root, MPI_Comm comm);
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm);
int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm);
int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm);
int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm);
int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                  const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Alltoallw(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[],
                  const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm);
int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                             MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int MPI_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
             MPI_Comm comm);
int MPI_Exscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               MPI_Comm comm);
int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request);
int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
               MPI_Request *request);
int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                int root, MPI_Comm comm, MPI_Request *request);
int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                   MPI_Op op, MPI_Comm comm, MPI_Request *request);
int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
int MPI_Igather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                MPI_Request *request);
int MPI_Iscatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                 MPI_Request *request);
int MPI_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
int MPI_Ireduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                              MPI_Request *request);
int MPI_Iscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
              MPI_Comm comm, MPI_Request *request);
int MPI_Iexscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                MPI_Comm comm, MPI_Request *request);

/* Datatypes */
int MPI_Type_contiguous(int count, MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_vector(int count, int blocklength, int stride, MPI_Datatype oldtype,
                    MPI_Datatype *newtype);
int MPI_Type_indexed(int count, const int array_of_blocklengths[],
                     const int array_of_displacements[], MPI_Datatype oldtype,
                     MPI_Datatype *newtype);
int MPI_Type_commit(MPI_Datatype *datatype);
int MPI_Type_free(MPI_Datatype *datatype);
int MPI_Type_size(MPI_Datatype datatype, int *size);
int MPI_Type_get_extent(MPI_Datatype datatype, MPI_Aint *lb, MPI_Aint *extent);
int MPI_Type_get_name(MPI_Datatype datatype, char *type_name, int *resultlen);
int MPI_Get_address(const void *location, MPI_Aint *address);

/* More point to point */
int MPI_Ssend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                   MPI_Comm comm, MPI_Request *request);
int MPI_Bsend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                   MPI_Comm comm, MPI_Request *request);
int MPI_Rsend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                   MPI_Comm comm, MPI_Request *request);
int MPI_Ibsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
               MPI_Comm comm, MPI_Request *request);
int MPI_Irsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
               MPI_Comm comm, MPI_Request *request);
int MPI_Isendrecv_replace(void *buf, int count, MPI_Datatype datatype, int dest, int sendtag,
                          int source, int recvtag, MPI_Comm comm, MPI_Request *request);
int MPI_Imrecv(void *buf, int count, MPI_Datatype datatype, MPI_Message *message,
               MPI_Request *request);
int MPI_Status_set_cancelled(MPI_Status *status, int flag);
int MPI_Status_set_elements_x(MPI_Status *status, MPI_Datatype datatype, MPI_Count count);
int MPI_Buffer_flush(void);
int MPI_Buffer_iflush(MPI_Request *request);
int MPI_Comm_attach_buffer(MPI_Comm comm, void *buffer, int size);
int MPI_Comm_detach_buffer(MPI_Comm comm, void *buffer_addr, int *size);
int MPI_Comm_flush_buffer(MPI_Comm comm);
int MPI_Comm_iflush_buffer(MPI_Comm comm, MPI_Request *request);

/* More communicators, attributes and info */
int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm);
int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm);
int MPI_Comm_idup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm,
                            MPI_Request *request);
int MPI_Comm_set_info(MPI_Comm comm, MPI_Info info);
int MPI_Comm_get_info(MPI_Comm comm, MPI_Info *info_used);
typedef int(MPI_Copy_function)(MPI_Comm oldcomm, int keyval, void *extra_state,
                               void *attribute_val_in, void *attribute_val_out, int *flag);
typedef int(MPI_Delete_function)(MPI_Comm comm, int keyval, void *attribute_val,
                                 void *extra_state);
int MPI_Keyval_create(MPI_Copy_function *copy_fn, MPI_Delete_function *delete_fn, int *keyval,
                      void *extra_state);
int MPI_Keyval_free(int *keyval);
int MPI_Attr_put(MPI_Comm comm, int keyval, void *attribute_val);
int MPI_Attr_get(MPI_Comm comm, int keyval, void *attribute_val, int *flag);
int MPI_Attr_delete(MPI_Comm comm, int keyval);
int MPI_Info_get(MPI_Info info, const char *key, int valuelen, char *value, int *flag);
int MPI_Info_get_string(MPI_Info info, const char *key, int *buflen, char *value, int *flag);
int MPI_Info_get_valuelen(MPI_Info info, const char *key, int *valuelen, int *flag);
int MPI_Info_get_nkeys(MPI_Info info, int *nkeys);
int MPI_Info_get_nthkey(MPI_Info info, int n, char *key);
int MPI_Info_delete(MPI_Info info, const char *key);
int MPI_Info_dup(MPI_Info info, MPI_Info *newinfo);

/* More collectives and datatypes */
int MPI_Ireduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request);
int MPI_Iallgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                    const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                    MPI_Comm comm, MPI_Request *request);
int MPI_Igatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                 MPI_Comm comm, MPI_Request *request);
int MPI_Iscatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                  MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                  int root, MPI_Comm comm, MPI_Request *request);
int MPI_Ialltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                   MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                   const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                   MPI_Request *request);
int MPI_Ialltoallw(const void *sendbuf, const int sendcounts[], const int sdispls[],
                   const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[],
                   const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm,
                   MPI_Request *request);
int MPI_Barrier_init(MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Bcast_init(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
                   MPI_Info info, MPI_Request *request);
int MPI_Bcast_init_c(void *buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm,
                     MPI_Info info, MPI_Request *request);
int MPI_Reduce_init(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                    MPI_Op op, int root, MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Reduce_init_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
                      MPI_Op op, int root, MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Allreduce_init(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                       MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Allreduce_init_c(const void *sendbuf, void *recvbuf, MPI_Count count,
                         MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Info info,
                         MPI_Request *request);
int MPI_Scan_init(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Scan_init_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
                    MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Exscan_init(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                    MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Exscan_init_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
                      MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Allgather_init(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                       int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                       MPI_Request *request);
int MPI_Allgather_init_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                         void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                         MPI_Info info, MPI_Request *request);
int MPI_Gather_init(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                    int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info,
                    MPI_Request *request);
int MPI_Gather_init_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                      void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype, int root,
                      MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Scatter_init(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                     int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info,
                     MPI_Request *request);
int MPI_Scatter_init_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                       void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype, int root,
                       MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Alltoall_init(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                      int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                      MPI_Request *request);
int MPI_Alltoall_init_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                        void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                        MPI_Info info, MPI_Request *request);
int MPI_Reduce_scatter_block_init(const void *sendbuf, void *recvbuf, int recvcount,
                                  MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Info info,
                                  MPI_Request *request);
int MPI_Reduce_scatter_block_init_c(const void *sendbuf, void *recvbuf, MPI_Count recvcount,
                                    MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Info info,
                                    MPI_Request *request);
int MPI_Reduce_scatter_init(const void *sendbuf, void *recvbuf, const int recvcounts[],
                            MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Info info,
                            MPI_Request *request);
int MPI_Allgatherv_init(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                        const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                        MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Gatherv_init(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                     const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                     MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Scatterv_init(const void *sendbuf, const int sendcounts[], const int displs[],
                      MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                      int root, MPI_Comm comm, MPI_Info info, MPI_Request *request);
int MPI_Alltoallv_init(const void *sendbuf, const int sendcounts[], const int sdispls[],
                       MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                       const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                       MPI_Request *request);
int MPI_Alltoallw_init(const void *sendbuf, const int sendcounts[], const int sdispls[],
                       const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[],
                       const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm,
                       MPI_Info info, MPI_Request *request);
int MPI_Allgatherv_init_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                          void *recvbuf, const MPI_Count recvcounts[], const MPI_Aint displs[],
                          MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                          MPI_Request *request);
int MPI_Gatherv_init_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                       void *recvbuf, const MPI_Count recvcounts[], const MPI_Aint displs[],
                       MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info,
                       MPI_Request *request);
int MPI_Scatterv_init_c(const void *sendbuf, const MPI_Count sendcounts[], const MPI_Aint displs[],
                        MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount,
                        MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info,
                        MPI_Request *request);
int MPI_Alltoallv_init_c(const void *sendbuf, const MPI_Count sendcounts[],
                         const MPI_Aint sdispls[], MPI_Datatype sendtype, void *recvbuf,
                         const MPI_Count recvcounts[], const MPI_Aint rdispls[],
                         MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                         MPI_Request *request);
int MPI_Alltoallw_init_c(const void *sendbuf, const MPI_Count sendcounts[],
                         const MPI_Aint sdispls[], const MPI_Datatype sendtypes[], void *recvbuf,
                         const MPI_Count recvcounts[], const MPI_Aint rdispls[],
                         const MPI_Datatype recvtypes[], MPI_Comm comm, MPI_Info info,
                         MPI_Request *request);
int MPI_Reduce_scatter_init_c(const void *sendbuf, void *recvbuf, const MPI_Count recvcounts[],
                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Info info,
                              MPI_Request *request);
int MPI_Reduce_local(const void *inbuf, void *inoutbuf, int count, MPI_Datatype datatype,
                     MPI_Op op);

/* Reductions of the program's own: inoutvec[i] = invec[i] op inoutvec[i]. */
typedef void(MPI_User_function)(void *invec, void *inoutvec, int *len, MPI_Datatype *datatype);
typedef void(MPI_User_function_c)(void *invec, void *inoutvec, MPI_Count *len,
                                  MPI_Datatype *datatype);
int MPI_Op_create(MPI_User_function *user_fn, int commute, MPI_Op *op);
int MPI_Op_create_c(MPI_User_function_c *user_fn, int commute, MPI_Op *op);
int MPI_Op_free(MPI_Op *op);
int MPI_Op_commutative(MPI_Op op, int *commute);

int MPI_Type_create_struct(int count, const int array_of_blocklengths[],
                           const MPI_Aint array_of_displacements[],
                           const MPI_Datatype array_of_types[], MPI_Datatype *newtype);
int MPI_Type_create_indexed_block(int count, int blocklength, const int array_of_displacements[],
                                  MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_create_hvector(int count, int blocklength, MPI_Aint stride, MPI_Datatype oldtype,
                            MPI_Datatype *newtype);
int MPI_Type_create_hindexed(int count, const int array_of_blocklengths[],
                             const MPI_Aint array_of_displacements[], MPI_Datatype oldtype,
                             MPI_Datatype *newtype);
int MPI_Type_create_hindexed_block(int count, int blocklength,
                                   const MPI_Aint array_of_displacements[], MPI_Datatype oldtype,
                                   MPI_Datatype *newtype);
int MPI_Type_create_resized(MPI_Datatype oldtype, MPI_Aint lb, MPI_Aint extent,
                            MPI_Datatype *newtype);
int MPI_Type_dup(MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_get_true_extent(MPI_Datatype datatype, MPI_Aint *true_lb, MPI_Aint *true_extent);
int MPI_Type_get_envelope(MPI_Datatype datatype, int *num_integers, int *num_addresses,
                          int *num_datatypes, int *combiner);
int MPI_Type_get_envelope_c(MPI_Datatype datatype, MPI_Count *num_integers,
                            MPI_Count *num_addresses, MPI_Count *num_large_counts,
                            MPI_Count *num_datatypes, int *combiner);
int MPI_Type_get_contents(MPI_Datatype datatype, int max_integers, int max_addresses,
                          int max_datatypes, int array_of_integers[],
                          MPI_Aint array_of_addresses[], MPI_Datatype array_of_datatypes[]);
int MPI_Type_get_contents_c(MPI_Datatype datatype, MPI_Count max_integers,
                            MPI_Count max_addresses, MPI_Count max_large_counts,
                            MPI_Count max_datatypes, int array_of_integers[],
                            MPI_Aint array_of_addresses[], MPI_Count array_of_large_counts[],
                            MPI_Datatype array_of_datatypes[]);
int MPI_Type_create_subarray(int ndims, const int array_of_sizes[],
                             const int array_of_subsizes[], const int array_of_starts[],
                             int order, MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_create_subarray_c(int ndims, const MPI_Count array_of_sizes[],
                               const MPI_Count array_of_subsizes[],
                               const MPI_Count array_of_starts[], int order,
                               MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_set_name(MPI_Datatype datatype, const char *type_name);
int MPI_Type_create_f90_real(int p, int r, MPI_Datatype *newtype);
int MPI_Type_create_f90_complex(int p, int r, MPI_Datatype *newtype);
int MPI_Type_create_f90_integer(int r, MPI_Datatype *newtype);
int MPI_Type_get_value_index(MPI_Datatype value_type, MPI_Datatype index_type,
                             MPI_Datatype *pair_type);
int MPI_Type_create_hvector_c(MPI_Count count, MPI_Count blocklength, MPI_Count stride,
                              MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_create_hindexed_c(MPI_Count count, const MPI_Count array_of_blocklengths[],
                               const MPI_Count array_of_displacements[], MPI_Datatype oldtype,
                               MPI_Datatype *newtype);
int MPI_Type_create_hindexed_block_c(MPI_Count count, MPI_Count blocklength,
                                     const MPI_Count array_of_displacements[],
                                     MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_create_resized_c(MPI_Datatype oldtype, MPI_Count lb, MPI_Count extent,
                              MPI_Datatype *newtype);
int MPI_Type_get_true_extent_c(MPI_Datatype datatype, MPI_Count *true_lb,
                               MPI_Count *true_extent);

/* Large-count forms: counts as MPI_Count, displacements as MPI_Aint */
int MPI_Allgather_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                    MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Allgatherv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                     const MPI_Count recvcounts[], const MPI_Aint displs[], MPI_Datatype recvtype,
                     MPI_Comm comm);
int MPI_Allreduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
                    MPI_Op op, MPI_Comm comm);
int MPI_Alltoall_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                   MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Alltoallv_c(const void *sendbuf, const MPI_Count sendcounts[], const MPI_Aint sdispls[],
                    MPI_Datatype sendtype, void *recvbuf, const MPI_Count recvcounts[],
                    const MPI_Aint rdispls[], MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Alltoallw_c(const void *sendbuf, const MPI_Count sendcounts[], const MPI_Aint sdispls[],
                    const MPI_Datatype sendtypes[], void *recvbuf, const MPI_Count recvcounts[],
                    const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm);
int MPI_Bcast_c(void *buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm);
int MPI_Bsend_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                MPI_Comm comm);
int MPI_Bsend_init_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                     MPI_Comm comm, MPI_Request *request);
int MPI_Buffer_attach_c(void *buffer, MPI_Count size);
int MPI_Buffer_detach_c(void *buffer_addr, MPI_Count *size);
int MPI_Comm_attach_buffer_c(MPI_Comm comm, void *buffer, MPI_Count size);
int MPI_Comm_detach_buffer_c(MPI_Comm comm, void *buffer_addr, MPI_Count *size);
int MPI_Exscan_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
                 MPI_Op op, MPI_Comm comm);
int MPI_Gather_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                 MPI_Count recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Gatherv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                  const MPI_Count recvcounts[], const MPI_Aint displs[], MPI_Datatype recvtype,
                  int root, MPI_Comm comm);
int MPI_Get_count_c(const MPI_Status *status, MPI_Datatype datatype, MPI_Count *count);
int MPI_Get_elements_c(const MPI_Status *status, MPI_Datatype datatype, MPI_Count *count);
int MPI_Iallgather_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                     MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                     MPI_Request *request);
int MPI_Iallreduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
                     MPI_Op op, MPI_Comm comm, MPI_Request *request);
int MPI_Ialltoall_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                    MPI_Count recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                    MPI_Request *request);
int MPI_Ibcast_c(void *buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm,
                 MPI_Request *request);
int MPI_Ibsend_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                 MPI_Comm comm, MPI_Request *request);
int MPI_Iexscan_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
                  MPI_Op op, MPI_Comm comm, MPI_Request *request);
int MPI_Igather_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                  MPI_Count recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                  MPI_Request *request);
int MPI_Imrecv_c(void *buf, MPI_Count count, MPI_Datatype datatype, MPI_Message *message,
                 MPI_Request *request);
int MPI_Irecv_c(void *buf, MPI_Count count, MPI_Datatype datatype, int source, int tag,
                MPI_Comm comm, MPI_Request *request);
int MPI_Ireduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
                  MPI_Op op, int root, MPI_Comm comm, MPI_Request *request);
int MPI_Ireduce_scatter_block_c(const void *sendbuf, void *recvbuf, MPI_Count recvcount,
                                MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                MPI_Request *request);
int MPI_Ireduce_scatter_c(const void *sendbuf, void *recvbuf, const MPI_Count recvcounts[],
                          MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request);
int MPI_Irsend_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                 MPI_Comm comm, MPI_Request *request);
int MPI_Iscan_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
                MPI_Op op, MPI_Comm comm, MPI_Request *request);
int MPI_Iscatter_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                   MPI_Count recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                   MPI_Request *request);
int MPI_Isend_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                MPI_Comm comm, MPI_Request *request);
int MPI_Isendrecv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, int dest,
                    int sendtag, void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype,
                    int source, int recvtag, MPI_Comm comm, MPI_Request *request);
int MPI_Isendrecv_replace_c(void *buf, MPI_Count count, MPI_Datatype datatype, int dest,
                            int sendtag, int source, int recvtag, MPI_Comm comm,
                            MPI_Request *request);
int MPI_Issend_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                 MPI_Comm comm, MPI_Request *request);
int MPI_Mrecv_c(void *buf, MPI_Count count, MPI_Datatype datatype, MPI_Message *message,
                MPI_Status *status);
int MPI_Recv_c(void *buf, MPI_Count count, MPI_Datatype datatype, int source, int tag,
               MPI_Comm comm, MPI_Status *status);
int MPI_Recv_init_c(void *buf, MPI_Count count, MPI_Datatype datatype, int source, int tag,
                    MPI_Comm comm, MPI_Request *request);
int MPI_Reduce_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
                 MPI_Op op, int root, MPI_Comm comm);
int MPI_Reduce_local_c(const void *inbuf, void *inoutbuf, MPI_Count count, MPI_Datatype datatype,
                       MPI_Op op);
int MPI_Reduce_scatter_block_c(const void *sendbuf, void *recvbuf, MPI_Count recvcount,
                               MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int MPI_Reduce_scatter_c(const void *sendbuf, void *recvbuf, const MPI_Count recvcounts[],
                         MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int MPI_Rsend_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                MPI_Comm comm);
int MPI_Rsend_init_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                     MPI_Comm comm, MPI_Request *request);
int MPI_Scan_c(const void *sendbuf, void *recvbuf, MPI_Count count, MPI_Datatype datatype,
               MPI_Op op, MPI_Comm comm);
int MPI_Scatter_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                  MPI_Count recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Scatterv_c(const void *sendbuf, const MPI_Count sendcounts[], const MPI_Aint displs[],
                   MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype,
                   int root, MPI_Comm comm);
int MPI_Send_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
               MPI_Comm comm);
int MPI_Send_init_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                    MPI_Comm comm, MPI_Request *request);
int MPI_Sendrecv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, int dest,
                   int sendtag, void *recvbuf, MPI_Count recvcount, MPI_Datatype recvtype,
                   int source, int recvtag, MPI_Comm comm, MPI_Status *status);
int MPI_Sendrecv_replace_c(void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int sendtag,
                           int source, int recvtag, MPI_Comm comm, MPI_Status *status);
int MPI_Ssend_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                MPI_Comm comm);
int MPI_Ssend_init_c(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag,
                     MPI_Comm comm, MPI_Request *request);
int MPI_Status_set_elements_c(MPI_Status *status, MPI_Datatype datatype, MPI_Count count);
int MPI_Type_contiguous_c(MPI_Count count, MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_create_indexed_block_c(MPI_Count count, MPI_Count blocklength,
                                    const MPI_Count array_of_displacements[], MPI_Datatype oldtype,
                                    MPI_Datatype *newtype);
int MPI_Type_get_extent_c(MPI_Datatype datatype, MPI_Count *lb, MPI_Count *extent);
int MPI_Type_indexed_c(MPI_Count count, const MPI_Count array_of_blocklengths[],
                       const MPI_Count array_of_displacements[], MPI_Datatype oldtype,
                       MPI_Datatype *newtype);
int MPI_Type_size_c(MPI_Datatype datatype, MPI_Count *size);
int MPI_Type_vector_c(MPI_Count count, MPI_Count blocklength, MPI_Count stride,
                      MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Iallgatherv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype,
                      void *recvbuf, const MPI_Count recvcounts[], const MPI_Aint displs[],
                      MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
int MPI_Igatherv_c(const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const MPI_Count recvcounts[], const MPI_Aint displs[], MPI_Datatype recvtype,
                   int root, MPI_Comm comm, MPI_Request *request);
int MPI_Iscatterv_c(const void *sendbuf, const MPI_Count sendcounts[], const MPI_Aint displs[],
                    MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount,
                    MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request);
int MPI_Ialltoallv_c(const void *sendbuf, const MPI_Count sendcounts[], const MPI_Aint sdispls[],
                     MPI_Datatype sendtype, void *recvbuf, const MPI_Count recvcounts[],
                     const MPI_Aint rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                     MPI_Request *request);
int MPI_Ialltoallw_c(const void *sendbuf, const MPI_Count sendcounts[], const MPI_Aint sdispls[],
                     const MPI_Datatype sendtypes[], void *recvbuf, const MPI_Count recvcounts[],
                     const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm,
                     MPI_Request *request);
int MPI_Type_create_struct_c(MPI_Count count, const MPI_Count array_of_blocklengths[],
                             const MPI_Aint array_of_displacements[],
                             const MPI_Datatype array_of_types[], MPI_Datatype *newtype);

/* Named by the OSU benchmarks' setup code; not implemented by meshwork
 * (they return MPI_ERR_UNSUPPORTED_OPERATION). */
int MPI_Win_create(void *base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                   MPI_Win *win);
int MPI_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr,
                     MPI_Win *win);
int MPI_Win_create_dynamic(MPI_Info info, MPI_Comm comm, MPI_Win *win);
int MPI_Win_attach(MPI_Win win, void *base, MPI_Aint size);
int MPI_Win_free(MPI_Win *win);
int MPI_Dims_create(int nnodes, int ndims, int dims[]);
int MPI_Cart_create(MPI_Comm comm_old, int ndims, const int dims[], const int periods[],
                    int reorder, MPI_Comm *comm_cart);
int MPI_Cart_coords(MPI_Comm comm, int rank, int maxdims, int coords[]);
int MPI_Cart_rank(MPI_Comm comm, const int coords[], int *rank);
int MPI_Dist_graph_neighbors(MPI_Comm comm, int maxindegree, int sources[], int *sourceweights,
                             int maxoutdegree, int destinations[], int *destweights);

/* The profiling interface: each function above is also PMPI_<name>, the
 * same function under a second name, so a tool (or the program) can define
 * MPI_<name> around it and call PMPI_<name> for meshwork's. Every function
 * libmpi_abi exports has its PMPI_ name, declared or not. */
#ifdef __cplusplus
#define MESHWORK_PMPI(name) extern decltype(MPI_##name) PMPI_##name;
#else
#define MESHWORK_PMPI(name) extern __typeof__(MPI_##name) PMPI_##name;
#endif
MESHWORK_PMPI(Comm_toint) MESHWORK_PMPI(Comm_fromint) MESHWORK_PMPI(Errhandler_toint)
MESHWORK_PMPI(Errhandler_fromint) MESHWORK_PMPI(File_toint) MESHWORK_PMPI(File_fromint)
MESHWORK_PMPI(Group_toint) MESHWORK_PMPI(Group_fromint) MESHWORK_PMPI(Info_toint)
MESHWORK_PMPI(Info_fromint) MESHWORK_PMPI(Message_toint) MESHWORK_PMPI(Message_fromint)
MESHWORK_PMPI(Op_toint) MESHWORK_PMPI(Op_fromint) MESHWORK_PMPI(Request_toint)
MESHWORK_PMPI(Request_fromint) MESHWORK_PMPI(Session_toint) MESHWORK_PMPI(Session_fromint)
MESHWORK_PMPI(Type_toint) MESHWORK_PMPI(Type_fromint) MESHWORK_PMPI(Win_toint)
MESHWORK_PMPI(Win_fromint) MESHWORK_PMPI(Aint_add) MESHWORK_PMPI(Aint_diff)
MESHWORK_PMPI(Init) MESHWORK_PMPI(Init_thread) MESHWORK_PMPI(Finalize) MESHWORK_PMPI(Initialized)
MESHWORK_PMPI(Finalized) MESHWORK_PMPI(Abort) MESHWORK_PMPI(Query_thread)
MESHWORK_PMPI(Is_thread_main) MESHWORK_PMPI(Get_version) MESHWORK_PMPI(Get_library_version)
MESHWORK_PMPI(Get_processor_name) MESHWORK_PMPI(Wtime) MESHWORK_PMPI(Wtick)
MESHWORK_PMPI(Error_string) MESHWORK_PMPI(Error_class)
MESHWORK_PMPI(Add_error_class) MESHWORK_PMPI(Add_error_code) MESHWORK_PMPI(Add_error_string)
MESHWORK_PMPI(Remove_error_class) MESHWORK_PMPI(Remove_error_code)
MESHWORK_PMPI(Remove_error_string) MESHWORK_PMPI(Comm_create_errhandler) MESHWORK_PMPI(Comm_set_errhandler)
MESHWORK_PMPI(Comm_get_errhandler) MESHWORK_PMPI(Comm_call_errhandler)
MESHWORK_PMPI(Errhandler_free) MESHWORK_PMPI(Abi_get_version) MESHWORK_PMPI(Comm_rank)
MESHWORK_PMPI(Comm_size) MESHWORK_PMPI(Comm_dup) MESHWORK_PMPI(Comm_split) MESHWORK_PMPI(Comm_free)
MESHWORK_PMPI(Comm_compare) MESHWORK_PMPI(Comm_set_name) MESHWORK_PMPI(Comm_get_name)
MESHWORK_PMPI(Comm_test_inter) MESHWORK_PMPI(Comm_create_from_group) MESHWORK_PMPI(Group_free)
MESHWORK_PMPI(Group_from_session_pset) MESHWORK_PMPI(Session_init) MESHWORK_PMPI(Session_finalize)
MESHWORK_PMPI(Info_create) MESHWORK_PMPI(Info_create_env) MESHWORK_PMPI(Get_hw_resource_info)
MESHWORK_PMPI(Info_set) MESHWORK_PMPI(Info_free)
MESHWORK_PMPI(Comm_create_keyval) MESHWORK_PMPI(Comm_free_keyval) MESHWORK_PMPI(Comm_set_attr)
MESHWORK_PMPI(Comm_get_attr) MESHWORK_PMPI(Comm_delete_attr) MESHWORK_PMPI(Comm_group)
MESHWORK_PMPI(Group_size) MESHWORK_PMPI(Group_rank) MESHWORK_PMPI(Group_translate_ranks)
MESHWORK_PMPI(Group_compare) MESHWORK_PMPI(Group_union)
MESHWORK_PMPI(Group_intersection) MESHWORK_PMPI(Group_difference) MESHWORK_PMPI(Group_incl)
MESHWORK_PMPI(Group_excl) MESHWORK_PMPI(Group_range_incl) MESHWORK_PMPI(Group_range_excl)
MESHWORK_PMPI(Comm_split_type) MESHWORK_PMPI(Comm_dup_with_info)
MESHWORK_PMPI(Comm_idup) MESHWORK_PMPI(Comm_get_parent) MESHWORK_PMPI(Topo_test) MESHWORK_PMPI(Cart_create) MESHWORK_PMPI(Cartdim_get)
MESHWORK_PMPI(Cart_get) MESHWORK_PMPI(Cart_rank) MESHWORK_PMPI(Cart_coords) MESHWORK_PMPI(Cart_shift)
MESHWORK_PMPI(Cart_sub) MESHWORK_PMPI(Cart_map) MESHWORK_PMPI(Graph_create)
MESHWORK_PMPI(Graphdims_get) MESHWORK_PMPI(Graph_get) MESHWORK_PMPI(Graph_neighbors_count)
MESHWORK_PMPI(Graph_neighbors) MESHWORK_PMPI(Graph_map) MESHWORK_PMPI(Dist_graph_create_adjacent)
MESHWORK_PMPI(Dist_graph_create) MESHWORK_PMPI(Dist_graph_neighbors_count)
MESHWORK_PMPI(Dist_graph_neighbors) MESHWORK_PMPI(Pack) MESHWORK_PMPI(Pack_c)
MESHWORK_PMPI(Neighbor_allgather) MESHWORK_PMPI(Ineighbor_allgather)
MESHWORK_PMPI(Neighbor_allgather_init) MESHWORK_PMPI(Neighbor_allgather_c)
MESHWORK_PMPI(Ineighbor_allgather_c) MESHWORK_PMPI(Neighbor_allgather_init_c)
MESHWORK_PMPI(Neighbor_allgatherv) MESHWORK_PMPI(Ineighbor_allgatherv)
MESHWORK_PMPI(Neighbor_allgatherv_init) MESHWORK_PMPI(Neighbor_allgatherv_c)
MESHWORK_PMPI(Ineighbor_allgatherv_c) MESHWORK_PMPI(Neighbor_allgatherv_init_c)
MESHWORK_PMPI(Neighbor_alltoall) MESHWORK_PMPI(Ineighbor_alltoall)
MESHWORK_PMPI(Neighbor_alltoall_init) MESHWORK_PMPI(Neighbor_alltoall_c)
MESHWORK_PMPI(Ineighbor_alltoall_c) MESHWORK_PMPI(Neighbor_alltoall_init_c)
MESHWORK_PMPI(Neighbor_alltoallv) MESHWORK_PMPI(Ineighbor_alltoallv)
MESHWORK_PMPI(Neighbor_alltoallv_init) MESHWORK_PMPI(Neighbor_alltoallv_c)
MESHWORK_PMPI(Ineighbor_alltoallv_c) MESHWORK_PMPI(Neighbor_alltoallv_init_c)
MESHWORK_PMPI(Neighbor_alltoallw) MESHWORK_PMPI(Ineighbor_alltoallw)
MESHWORK_PMPI(Neighbor_alltoallw_init) MESHWORK_PMPI(Neighbor_alltoallw_c)
MESHWORK_PMPI(Ineighbor_alltoallw_c) MESHWORK_PMPI(Neighbor_alltoallw_init_c)
MESHWORK_PMPI(Unpack) MESHWORK_PMPI(Unpack_c) MESHWORK_PMPI(Pack_size) MESHWORK_PMPI(Pack_size_c)
MESHWORK_PMPI(Pack_external) MESHWORK_PMPI(Pack_external_c) MESHWORK_PMPI(Unpack_external)
MESHWORK_PMPI(Unpack_external_c) MESHWORK_PMPI(Pack_external_size) MESHWORK_PMPI(Pack_external_size_c)
MESHWORK_PMPI(Alloc_mem) MESHWORK_PMPI(Free_mem) MESHWORK_PMPI(Send) MESHWORK_PMPI(Ssend)
MESHWORK_PMPI(Rsend) MESHWORK_PMPI(Recv) MESHWORK_PMPI(Isend) MESHWORK_PMPI(Issend)
MESHWORK_PMPI(Irecv) MESHWORK_PMPI(Sendrecv) MESHWORK_PMPI(Sendrecv_replace) MESHWORK_PMPI(Probe)
MESHWORK_PMPI(Iprobe) MESHWORK_PMPI(Get_count) MESHWORK_PMPI(Get_elements) MESHWORK_PMPI(Wait)
MESHWORK_PMPI(Waitall) MESHWORK_PMPI(Waitany) MESHWORK_PMPI(Test) MESHWORK_PMPI(Testall)
MESHWORK_PMPI(Testany) MESHWORK_PMPI(Request_free) MESHWORK_PMPI(Request_get_status)
MESHWORK_PMPI(Request_get_status_any) MESHWORK_PMPI(Request_get_status_all)
MESHWORK_PMPI(Request_get_status_some)
MESHWORK_PMPI(Cancel) MESHWORK_PMPI(Test_cancelled) MESHWORK_PMPI(Waitsome) MESHWORK_PMPI(Testsome)
MESHWORK_PMPI(Send_init) MESHWORK_PMPI(Recv_init) MESHWORK_PMPI(Start) MESHWORK_PMPI(Startall)
MESHWORK_PMPI(Bsend) MESHWORK_PMPI(Buffer_attach) MESHWORK_PMPI(Buffer_detach)
MESHWORK_PMPI(Isendrecv) MESHWORK_PMPI(Mprobe) MESHWORK_PMPI(Improbe) MESHWORK_PMPI(Mrecv)
MESHWORK_PMPI(Grequest_start) MESHWORK_PMPI(Grequest_complete)
MESHWORK_PMPI(Status_set_source) MESHWORK_PMPI(Status_set_tag) MESHWORK_PMPI(Status_set_error)
MESHWORK_PMPI(Status_set_elements) MESHWORK_PMPI(Status_get_source) MESHWORK_PMPI(Status_get_tag)
MESHWORK_PMPI(Status_get_error) MESHWORK_PMPI(Barrier) MESHWORK_PMPI(Bcast) MESHWORK_PMPI(Reduce)
MESHWORK_PMPI(Allreduce) MESHWORK_PMPI(Allgather) MESHWORK_PMPI(Allgatherv) MESHWORK_PMPI(Gather)
MESHWORK_PMPI(Gatherv) MESHWORK_PMPI(Scatter) MESHWORK_PMPI(Scatterv) MESHWORK_PMPI(Alltoall)
MESHWORK_PMPI(Alltoallv) MESHWORK_PMPI(Alltoallw) MESHWORK_PMPI(Reduce_scatter)
MESHWORK_PMPI(Reduce_scatter_block) MESHWORK_PMPI(Scan) MESHWORK_PMPI(Exscan)
MESHWORK_PMPI(Ibarrier) MESHWORK_PMPI(Ibcast) MESHWORK_PMPI(Ireduce) MESHWORK_PMPI(Iallreduce)
MESHWORK_PMPI(Iallgather) MESHWORK_PMPI(Igather) MESHWORK_PMPI(Iscatter) MESHWORK_PMPI(Ialltoall)
MESHWORK_PMPI(Ireduce_scatter_block) MESHWORK_PMPI(Iscan) MESHWORK_PMPI(Iexscan)
MESHWORK_PMPI(Type_contiguous) MESHWORK_PMPI(Type_vector) MESHWORK_PMPI(Type_indexed)
MESHWORK_PMPI(Type_commit) MESHWORK_PMPI(Type_free) MESHWORK_PMPI(Type_size)
MESHWORK_PMPI(Type_get_extent) MESHWORK_PMPI(Type_get_name) MESHWORK_PMPI(Get_address)
MESHWORK_PMPI(Ssend_init) MESHWORK_PMPI(Bsend_init) MESHWORK_PMPI(Rsend_init) MESHWORK_PMPI(Ibsend)
MESHWORK_PMPI(Irsend) MESHWORK_PMPI(Isendrecv_replace) MESHWORK_PMPI(Imrecv)
MESHWORK_PMPI(Status_set_cancelled) MESHWORK_PMPI(Status_set_elements_x)
MESHWORK_PMPI(Buffer_flush) MESHWORK_PMPI(Buffer_iflush) MESHWORK_PMPI(Comm_attach_buffer)
MESHWORK_PMPI(Comm_detach_buffer) MESHWORK_PMPI(Comm_flush_buffer)
MESHWORK_PMPI(Comm_iflush_buffer) MESHWORK_PMPI(Comm_create) MESHWORK_PMPI(Comm_create_group)
MESHWORK_PMPI(Comm_idup_with_info) MESHWORK_PMPI(Comm_set_info) MESHWORK_PMPI(Comm_get_info)
MESHWORK_PMPI(Keyval_create) MESHWORK_PMPI(Keyval_free) MESHWORK_PMPI(Attr_put)
MESHWORK_PMPI(Attr_get) MESHWORK_PMPI(Attr_delete) MESHWORK_PMPI(Info_get)
MESHWORK_PMPI(Info_get_string) MESHWORK_PMPI(Info_get_valuelen) MESHWORK_PMPI(Info_get_nkeys)
MESHWORK_PMPI(Info_get_nthkey) MESHWORK_PMPI(Info_delete) MESHWORK_PMPI(Info_dup)
MESHWORK_PMPI(Ireduce_scatter) MESHWORK_PMPI(Iallgatherv) MESHWORK_PMPI(Igatherv)
MESHWORK_PMPI(Iscatterv) MESHWORK_PMPI(Ialltoallv) MESHWORK_PMPI(Ialltoallw)
MESHWORK_PMPI(Reduce_local) MESHWORK_PMPI(Allgatherv_init_c)
MESHWORK_PMPI(Gatherv_init_c) MESHWORK_PMPI(Scatterv_init_c) MESHWORK_PMPI(Alltoallv_init_c)
MESHWORK_PMPI(Alltoallw_init_c) MESHWORK_PMPI(Reduce_scatter_init_c)
MESHWORK_PMPI(Barrier_init) MESHWORK_PMPI(Bcast_init) MESHWORK_PMPI(Bcast_init_c)
MESHWORK_PMPI(Reduce_init) MESHWORK_PMPI(Reduce_init_c) MESHWORK_PMPI(Allreduce_init)
MESHWORK_PMPI(Allreduce_init_c) MESHWORK_PMPI(Scan_init) MESHWORK_PMPI(Scan_init_c)
MESHWORK_PMPI(Exscan_init) MESHWORK_PMPI(Exscan_init_c) MESHWORK_PMPI(Allgather_init)
MESHWORK_PMPI(Allgather_init_c) MESHWORK_PMPI(Gather_init) MESHWORK_PMPI(Gather_init_c)
MESHWORK_PMPI(Scatter_init) MESHWORK_PMPI(Scatter_init_c) MESHWORK_PMPI(Alltoall_init)
MESHWORK_PMPI(Alltoall_init_c) MESHWORK_PMPI(Reduce_scatter_block_init)
MESHWORK_PMPI(Reduce_scatter_block_init_c) MESHWORK_PMPI(Reduce_scatter_init)
MESHWORK_PMPI(Allgatherv_init) MESHWORK_PMPI(Gatherv_init) MESHWORK_PMPI(Scatterv_init)
MESHWORK_PMPI(Alltoallv_init) MESHWORK_PMPI(Alltoallw_init) MESHWORK_PMPI(Type_create_struct)
MESHWORK_PMPI(Type_create_indexed_block) MESHWORK_PMPI(Allgather_c) MESHWORK_PMPI(Allgatherv_c)
MESHWORK_PMPI(Allreduce_c) MESHWORK_PMPI(Alltoall_c) MESHWORK_PMPI(Alltoallv_c)
MESHWORK_PMPI(Alltoallw_c) MESHWORK_PMPI(Bcast_c) MESHWORK_PMPI(Bsend_c)
MESHWORK_PMPI(Bsend_init_c) MESHWORK_PMPI(Buffer_attach_c) MESHWORK_PMPI(Buffer_detach_c)
MESHWORK_PMPI(Comm_attach_buffer_c) MESHWORK_PMPI(Comm_detach_buffer_c) MESHWORK_PMPI(Exscan_c)
MESHWORK_PMPI(Gather_c) MESHWORK_PMPI(Gatherv_c) MESHWORK_PMPI(Get_count_c)
MESHWORK_PMPI(Get_elements_c) MESHWORK_PMPI(Iallgather_c) MESHWORK_PMPI(Iallreduce_c)
MESHWORK_PMPI(Ialltoall_c) MESHWORK_PMPI(Ibcast_c) MESHWORK_PMPI(Ibsend_c) MESHWORK_PMPI(Iexscan_c)
MESHWORK_PMPI(Igather_c) MESHWORK_PMPI(Imrecv_c) MESHWORK_PMPI(Irecv_c) MESHWORK_PMPI(Ireduce_c)
MESHWORK_PMPI(Ireduce_scatter_block_c) MESHWORK_PMPI(Ireduce_scatter_c) MESHWORK_PMPI(Irsend_c)
MESHWORK_PMPI(Iscan_c) MESHWORK_PMPI(Iscatter_c) MESHWORK_PMPI(Isend_c) MESHWORK_PMPI(Isendrecv_c)
MESHWORK_PMPI(Isendrecv_replace_c) MESHWORK_PMPI(Issend_c) MESHWORK_PMPI(Mrecv_c)
MESHWORK_PMPI(Recv_c) MESHWORK_PMPI(Recv_init_c) MESHWORK_PMPI(Reduce_c)
MESHWORK_PMPI(Reduce_local_c) MESHWORK_PMPI(Reduce_scatter_block_c) MESHWORK_PMPI(Reduce_scatter_c)
MESHWORK_PMPI(Rsend_c) MESHWORK_PMPI(Rsend_init_c) MESHWORK_PMPI(Scan_c) MESHWORK_PMPI(Scatter_c)
MESHWORK_PMPI(Scatterv_c) MESHWORK_PMPI(Send_c) MESHWORK_PMPI(Send_init_c)
MESHWORK_PMPI(Sendrecv_c) MESHWORK_PMPI(Sendrecv_replace_c) MESHWORK_PMPI(Ssend_c)
MESHWORK_PMPI(Ssend_init_c) MESHWORK_PMPI(Status_set_elements_c) MESHWORK_PMPI(Type_contiguous_c)
MESHWORK_PMPI(Type_create_indexed_block_c) MESHWORK_PMPI(Type_get_extent_c)
MESHWORK_PMPI(Type_indexed_c) MESHWORK_PMPI(Type_size_c) MESHWORK_PMPI(Type_vector_c)
MESHWORK_PMPI(Iallgatherv_c) MESHWORK_PMPI(Igatherv_c) MESHWORK_PMPI(Iscatterv_c)
MESHWORK_PMPI(Ialltoallv_c) MESHWORK_PMPI(Ialltoallw_c) MESHWORK_PMPI(Type_create_struct_c)
MESHWORK_PMPI(Win_create) MESHWORK_PMPI(Win_allocate) MESHWORK_PMPI(Win_create_dynamic)
MESHWORK_PMPI(Win_attach) MESHWORK_PMPI(Win_free) MESHWORK_PMPI(Dims_create)
MESHWORK_PMPI(Cart_create) MESHWORK_PMPI(Cart_coords) MESHWORK_PMPI(Cart_rank)
MESHWORK_PMPI(Dist_graph_neighbors)
MESHWORK_PMPI(Op_create) MESHWORK_PMPI(Op_create_c) MESHWORK_PMPI(Op_free)
MESHWORK_PMPI(Op_commutative)
MESHWORK_PMPI(Pcontrol)
MESHWORK_PMPI(Type_create_hvector) MESHWORK_PMPI(Type_create_hindexed)
MESHWORK_PMPI(Type_create_hindexed_block) MESHWORK_PMPI(Type_create_resized) MESHWORK_PMPI(Type_dup)
MESHWORK_PMPI(Type_get_true_extent) MESHWORK_PMPI(Type_get_envelope)
MESHWORK_PMPI(Type_get_envelope_c) MESHWORK_PMPI(Type_get_contents)
MESHWORK_PMPI(Type_get_contents_c) MESHWORK_PMPI(Type_get_value_index) MESHWORK_PMPI(Type_create_f90_real)
MESHWORK_PMPI(Type_create_f90_complex) MESHWORK_PMPI(Type_create_f90_integer) MESHWORK_PMPI(Dims_create)
MESHWORK_PMPI(Type_create_subarray) MESHWORK_PMPI(Type_create_subarray_c)
MESHWORK_PMPI(Type_set_name)
MESHWORK_PMPI(Type_create_hvector_c)
MESHWORK_PMPI(Type_create_hindexed_c) MESHWORK_PMPI(Type_create_hindexed_block_c)
MESHWORK_PMPI(Type_create_resized_c) MESHWORK_PMPI(Type_get_true_extent_c)
#undef MESHWORK_PMPI

#ifdef __cplusplus
}
#endif

#endif /* MESHWORK_MPI_H */
